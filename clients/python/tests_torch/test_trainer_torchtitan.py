"""The torchtitan adapter (dataloaderd.trainers.torchtitan) with torchtitan
0.3.0, on a CPU: torchtitan's Trainer itself cannot run here (its attention
has no CPU backward; scripts/gpu_check_torchtitan.py runs it on a GPU), so
these tests use its interfaces: the config read by its ConfigManager, the
dataloader built with the trainer's arguments, its CheckpointManager saving
and loading it, its loss on the batches.

Under torchrun (gloo) with the real daemon: 2 ranks, kill -9 after a
checkpoint, a resume on 3 ranks through CheckpointManager.load: every token
of the epoch exactly once, and every rank's data ends at the same step."""

import json
import math
import os

import pytest
import torch

from corpus import make_corpus
from rundaemon import Daemon
from torchrun_job import check_exactly_once, finish, kill_after_checkpoint, start

from dataloaderd import ConfigError, Loader
from dataloaderd.trainers.torchtitan import DataloaderdDataLoader
from torchtitan.components.loss import IGNORE_INDEX

WORKER = os.path.join(os.path.dirname(__file__), "titan_train.py")


def job_config(tmp_path, **over):
    datasets, ranges = make_corpus(str(tmp_path))
    config = {"seq_len": 32, "batch_size": 4, "seed": 3, "logical_shards": 12, "eos_id": 0, "epochs": 1,
              "metadata": ["position_ids", "loss_mask"], "datasets": datasets, **over}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    return str(path), {t for lo, hi in ranges for t in range(lo, hi)}


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


def build(path, daemon, dp_rank=0, dp_world_size=1, seq_len=32, batch=4, **fields):
    """The adapter as Trainer.__init__ builds it (config.dataloader.build(...))."""
    config = DataloaderdDataLoader.Config(job_config=path, socket=daemon.socket, **fields)
    return config.build(dp_world_size=dp_world_size, dp_rank=dp_rank, tokenizer=None, seq_len=seq_len,
                        local_batch_size=batch, snapshot_every_n_steps=None)


def test_batches_are_torchtitans_inputs_positions_and_masked_labels(tmp_path, daemon):
    path, _ = job_config(tmp_path, mask_document_boundaries=True)
    loader = build(path, daemon)
    with Loader(path, dp_rank=0, dp_size=1, socket=daemon.socket, job="raw") as raw:
        pairs = list(zip(loader, raw))
    loader.close()
    assert len(pairs) > 5
    for (inputs, labels), batch in pairs:
        assert sorted(inputs) == ["input", "positions"]  # every other key would reach the model's forward
        n = batch["lines"]
        assert torch.equal(inputs["input"][:n], batch["input_ids"])
        assert torch.equal(inputs["positions"][:n], batch["position_ids"])
        want = torch.where(batch["loss_mask"], batch["shift_labels"], torch.full_like(batch["shift_labels"], -100))
        assert torch.equal(labels[:n], want)
        assert labels.dtype == inputs["input"].dtype == inputs["positions"].dtype == torch.int64
        # a short batch (a bounded run's last) is filled to one shape (CUDA graphs) with lines that do not count
        assert labels.shape == inputs["input"].shape == inputs["positions"].shape == (4, 32)
        assert (inputs["input"][n:] == 0).all() and (inputs["positions"][n:] == 0).all()
        assert (labels[n:] == IGNORE_INDEX).all()
    assert any(batch["lines"] < 4 for _, batch in pairs), "no short batch: the filling was not tested"
    masked = sum(int((labels == IGNORE_INDEX).sum()) for (_, labels), _ in pairs)
    assert masked > 0, "no label was masked: the corpus has document ends and a padded last batch"


def test_one_rank_ends_at_its_last_batch(tmp_path, daemon):
    """One rank with end="pad": the data ends (StopIteration, torchtitan's
    DataloaderExhaustedError) at its first padding batch, never after one."""
    path, tokens = job_config(tmp_path)
    loader = build(path, daemon)
    got = [(inputs, labels) for inputs, labels in loader]
    loader.close()
    assert not any(bool((labels == IGNORE_INDEX).all()) for _, labels in got), "a padding batch was yielded"
    carried = {t for inputs, labels in got for t in torch.cat([inputs["input"], labels[:, -1:]], 1).reshape(-1).tolist()}
    assert tokens <= carried


def test_refusals_name_what_to_change(tmp_path, daemon):
    path, _ = job_config(tmp_path)
    with pytest.raises(ConfigError, match="end='stop' with 2 data-parallel ranks"):
        build(path, daemon, dp_world_size=2, end="stop")
    with pytest.raises(ConfigError, match="seq_len 32 and batch_size 4, but torchtitan's training.seq_len is 64"):
        build(path, daemon, seq_len=64)
    bare, _ = job_config(tmp_path, metadata=["position_ids"])
    with pytest.raises(ConfigError, match="metadata lacks loss_mask"):
        build(bare, daemon)
    cont, _ = job_config(tmp_path, positions="continue")
    with pytest.raises(ConfigError, match="positions: continue"):
        build(cont, daemon)


def test_killed_job_resumes_on_three_ranks_through_checkpoint_manager_exactly_once(tmp_path):
    path, tokens = job_config(tmp_path)
    job = {"tmp": tmp_path, "tokens": tokens}
    (tmp_path / "ckpt").mkdir()

    def run(name, nproc, hang_at=0):
        program = [WORKER, "--records", str(tmp_path / f"log-{name}"), "--hang-at", str(hang_at), "--",
                   "--dataloader.job_config", path, "--dump_folder", str(tmp_path)]
        return start(job, name, nproc, program)

    saved = kill_after_checkpoint(job, "a", run("a", 2, hang_at=7), 5)
    assert saved == 5
    resumed = run("b", 3)
    finish(job, "b", resumed)
    # CheckpointManager.load resumed every rank at the step after the
    # checkpoint, and every token of the corpus was served once.
    after = check_exactly_once(job, "a", 2, "b", 3, saved)
    ends = {rank: recs[-1] for rank, recs in after.items()}
    assert all(r.get("exhausted") for r in ends.values()), f"a rank did not reach the end of the data: {ends}"
    assert len({r["step"] for r in ends.values()}) == 1, f"the ranks' data ended at different steps: {ends}"
    assert any(r.get("padding") for recs in after.values() for r in recs), "no rank padded: the end was not tested"
    assert all(math.isfinite(r["loss"]) for recs in after.values() for r in recs if "loss" in r)
