"""dataloaderd.explain through the real binary: the rows it gives for a
batch a Loader received from the real daemon (by the batch's batch_id, or
by step) name the documents and token spans the batch's lines hold, from
the run's start and from a checkpoint saved by 2 ranks and resumed on 3."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from corpus import unique_docs, write_megatron
from dataloaderd import ConfigError, Loader, explain
from rundaemon import BIN

BOS, PAD = 900_000, 900_001


def corpus(tmp_path) -> Tuple[Dict[str, Any], List[List[np.ndarray]]]:
    """Two Megatron datasets of unique tokens, endless; and their documents."""
    rng = np.random.default_rng(11)
    docs, datasets, first = [], [], 1
    for i, (n, max_len) in enumerate(((50, 40), (30, 12))):
        d, first = unique_docs(rng, n, max_len, first)
        docs.append(d)
        datasets.append({"name": f"d{i}", "path": write_megatron(os.path.join(tmp_path, f"d{i}"), d),
                         "format": "megatron", "weight": 1.0 + i})
    cfg = {"seq_len": 19, "batch_size": 2, "seed": 8, "logical_shards": 6, "eos_id": 0, "bos_id": BOS,
           "pad_id": PAD, "shuffle_window": 3, "datasets": datasets}
    return cfg, docs


def take(sock: str, cfg, world: int, steps: int, resume=None, save_at=None, save=None) -> List[Dict[str, Any]]:
    """Each rank's first `steps` batches (tokens copied), saving after save_at."""
    out = []
    for r in range(world):
        with Loader(cfg, socket=sock, dp_rank=r, dp_size=world, job=f"x{world}", resume_from=resume) as loader:
            for i, batch in enumerate(loader):
                out.append({"rank": r, "step": batch["step"], "id": batch["batch_id"],
                            "tokens": np.array(batch["tokens"])})
                if i + 1 == save_at:
                    loader.save(save)
                if i + 1 == steps:
                    break
    return out


def check(batch: Dict[str, Any], rows: List[Dict[str, Any]], docs) -> None:
    """The rows of one batch name what its lines hold, tiling them up to the
    padding."""
    rows = [r for r in rows if r["dp_rank"] == batch["rank"] and r["step"] == batch["step"]]
    assert rows and all(r["batch_id"] == batch["id"] for r in rows)
    names = {"d0": 0, "d1": 1}
    tokens = batch["tokens"]
    ends = [0] * tokens.shape[0]
    for r in rows:
        assert r["column_start"] == ends[r["line"]], r
        ends[r["line"]] = r["column_end"]
        doc = docs[names[r["dataset"]]][r["document"]]
        want = ([BOS] if r["bos"] else []) + doc[r["token_start"]:r["token_end"]].tolist() + ([0] if r["eos"] else [])
        assert tokens[r["line"], r["column_start"]:r["column_end"]].tolist() == want, r
        assert r["file"].endswith(f"{r['dataset']}.bin")
    for line, end in enumerate(ends):
        assert (tokens[line, end:] == PAD).all()


def test_explain_names_what_the_loader_received(daemon_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("DATALOADERD_BIN", BIN)
    cfg, docs = corpus(tmp_path)
    d = daemon_factory()
    folder = str(tmp_path / "ckpt")
    first = take(d.socket, cfg, 2, steps=5, save_at=3, save=folder)
    assert first[0]["id"].endswith("-s1-r0of2") and len(first[0]["id"].split("-")[0]) == 8
    for b in first:
        check(b, explain(cfg, batch_id=b["id"]), docs)
    both = explain(cfg, step=4, dp_size=2)
    for b in first:
        if b["step"] == 4:
            check(b, both, docs)
    # The daemon dies; 3 ranks of another resume from the save.
    d.proc.kill()
    d.proc.wait()
    d2 = daemon_factory()
    rest = take(d2.socket, cfg, 3, steps=4, resume=folder)
    assert rest[0]["step"] == 4
    for b in rest:
        check(b, explain(cfg, batch_id=b["id"], checkpoint=folder), docs)
    ranged = explain(cfg, steps=(4, 7), checkpoint=folder, dp_rank=2, dp_size=3)
    for b in rest:
        if b["rank"] == 2:
            check(b, ranged, docs)


def test_explain_refuses_what_it_cannot_answer(tmp_path, monkeypatch):
    monkeypatch.setenv("DATALOADERD_BIN", BIN)
    cfg, _ = corpus(tmp_path)
    with pytest.raises(ConfigError, match="one of step, steps and batch_id"):
        explain(cfg, step=3, batch_id="0badf00d-s3-r0of1")
    with pytest.raises(Exception, match="another job"):
        explain(cfg, batch_id="0badf00d-s3-r0of1")
    with pytest.raises(ConfigError, match="--ranks"):
        explain(cfg, step=3)
