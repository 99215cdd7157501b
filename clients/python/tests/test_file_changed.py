"""A corpus file replaced in place while a session reads it (what `cp new.bin
X.bin` does: truncate, then write) fails that session with FileChangedError
naming the file; the daemon and its other sessions go on. Before, the
daemon died of SIGBUS with every session on the node."""

import subprocess

import pytest

from corpus import make_corpus
from dataloaderd import FileChangedError, Loader
from rundaemon import BIN


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
def test_cp_over_a_corpus_file_fails_only_its_session(daemon, tmp_path, fast):
    victim_dir, other_dir = tmp_path / "victim", tmp_path / "other"
    victim_dir.mkdir()
    other_dir.mkdir()
    victim_ds, _ = make_corpus(str(victim_dir), seed=1)
    other_ds, _ = make_corpus(str(other_dir), seed=2)
    cfg = {"seq_len": 31, "batch_size": 2, "seed": 5, "logical_shards": 8, "eos_id": 0}
    victim = Loader(dict(cfg, datasets=victim_ds), socket=daemon.socket, dp_rank=0, dp_size=1, job="victim", fast=fast)
    other = Loader(dict(cfg, datasets=other_ds), socket=daemon.socket, dp_rank=0, dp_size=1, job="other", fast=fast)
    with victim, other:
        vit, oit = iter(victim), iter(other)
        next(vit)
        next(oit)
        bin_path = victim_ds[0]["path"] + ".bin"
        with open(bin_path, "wb") as f:  # as cp does: O_TRUNC, then the new bytes
            f.write(b"\x01" * 64)
        with pytest.raises(FileChangedError, match=bin_path):
            for _ in range(100000):
                next(vit)
        for _ in range(50):
            next(oit)
    check = subprocess.run([BIN, "healthcheck", "--socket", daemon.socket], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
