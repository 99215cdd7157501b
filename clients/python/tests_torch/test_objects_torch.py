"""examples/train_gpt.py under real torchrun (DDP on gloo, DCP), its corpus
in object storage: a real S3-compatible server (versitygw), the daemon
reading it through the standard AWS environment the wrapper passes on. The
job is killed with kill -9 after a checkpoint and resumes on another world
size; every token of the epoch is served exactly once."""

import json
import os

from corpus import make_corpus
from test_objects import BUCKET, S3Server
from test_train_gpt import finish, kill_after_checkpoint, launch, records


def test_a_job_on_s3_killed_resumes_on_another_world_size_exactly_once(tmp_path, monkeypatch):
    s3 = S3Server(tmp_path)
    try:
        s3.environ(monkeypatch)  # launch() passes os.environ to the wrapper and its daemon
        corpus_dir = s3.root / BUCKET / "corpus"
        corpus_dir.mkdir(parents=True)
        datasets, ranges = make_corpus(str(corpus_dir))
        for d in datasets:
            d["path"] = f"s3://{BUCKET}/corpus/" + os.path.basename(d["path"])
        config = {"seq_len": 16, "batch_size": 4, "seed": 3, "logical_shards": 12, "eos_id": 0, "epochs": 1,
                  "datasets": datasets}
        path = tmp_path / "job.json"
        path.write_text(json.dumps(config))
        tokens = {t for lo, hi in ranges for t in range(lo, hi)}
        job = {"config": str(path), "vocab": max(tokens) + 1, "tokens": tokens, "tmp": tmp_path}

        first = launch(job, "a", 2)
        saved = kill_after_checkpoint(job, "a", first, 10)
        resumed = launch(job, "b", 3, resume=True)
        finish(job, "b", resumed)
        before = [r for recs in records(job, "a")[2].values() for r in recs if r["step"] <= saved]
        after = records(job, "b")[3]
        served = [t for r in before for t in r["tokens"]] + [t for recs in after.values() for r in recs for t in r["tokens"]]
        data = [t for t in served if t != 0]
        assert len(data) == len(set(data)), "a token was served twice"
        assert set(data) == tokens, f"{len(tokens - set(data))} tokens of the epoch were never served"
        assert min(r["step"] for recs in after.values() for r in recs) == saved + 1
    finally:
        s3.stop()
