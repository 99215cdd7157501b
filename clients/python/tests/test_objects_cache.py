"""The disk cache of s3:// datasets (--object-cache-dir) through the real
daemon binary and the real S3 test server: a daemon restarted on the same
folder serves the next epoch without fetching a byte, and every token of
each epoch exactly once; a second daemon on a folder in use is refused,
naming it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from corpus import make_corpus
from rundaemon import Daemon, free_port, scrape
from test_exactly_once import phase
from test_objects import BUCKET, S3Server


@pytest.fixture
def s3(tmp_path: Path):
    server = S3Server(tmp_path)
    yield server
    server.stop()


def test_disk_cache_survives_a_daemon_restart(s3, monkeypatch, tmp_path):
    s3.environ(monkeypatch)
    corpus_dir = s3.root / BUCKET / "corpus"
    corpus_dir.mkdir(parents=True)
    datasets, ranges = make_corpus(str(corpus_dir), seed=6)
    corpus_bytes = sum(p.stat().st_size for p in corpus_dir.iterdir())
    for d in datasets:
        d["path"] = f"s3://{BUCKET}/corpus/" + os.path.basename(d["path"])
    cache = tmp_path / "cache"
    cache.mkdir()
    want = np.arange(ranges[0][0], ranges[-1][1], dtype=np.int32)
    rng = np.random.default_rng(6)

    def start(name: str) -> tuple:
        port = free_port()
        sub = tmp_path / name
        sub.mkdir()
        d = Daemon(sub, ["--allow-root", f"s3://{BUCKET}/corpus", "--allow-root", str(tmp_path),
                         "--object-cache-dir", str(cache), "--object-cache-disk-mb", "64",
                         "--object-block-kb", "4", "--metrics-addr", f"127.0.0.1:{port}"])
        return d, port

    def epoch(daemon: Daemon, seed: int, job: str) -> None:
        config = {"seq_len": 17, "batch_size": 2, "seed": seed, "logical_shards": 6, "eos_id": 0, "epochs": 1,
                  "datasets": datasets}
        got = np.sort(np.concatenate(phase(daemon, config, job, 2, str(tmp_path), rng)))
        assert np.array_equal(got, want), (
            f"{job}: {np.setdiff1d(want, got).size} tokens never served, {got.size - np.unique(got).size} twice")

    first, port = start("first")
    try:
        epoch(first, 1, "cold")
        fetched = scrape(port)["dataloaderd_object_fetched_bytes_total"]
        assert corpus_bytes <= fetched <= 2 * corpus_bytes, (fetched, corpus_bytes)
        # A second daemon on the folder in use is refused, naming it.
        second = tmp_path / "second"
        second.mkdir()
        with pytest.raises(RuntimeError, match=str(cache)):
            Daemon(second, ["--object-cache-dir", str(cache), "--object-cache-disk-mb", "64"])
    finally:
        first.stop()

    again, port = start("again")
    try:
        epoch(again, 2, "warm")
        metrics = scrape(port)
        assert metrics["dataloaderd_object_fetched_bytes_total"] == 0, metrics
        assert metrics['dataloaderd_object_cache_lookups_total{result="hit"}'] > 0, metrics
    finally:
        again.stop()
