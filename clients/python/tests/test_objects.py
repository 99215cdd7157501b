"""s3:// datasets through the real daemon and a real S3-compatible server
(versitygw, built by make into .tools and named by DATALOADERD_S3_SERVER):
ranks in processes read, save, lose a rank to SIGKILL and resume on another
world size, and every token is served exactly once; a dataset outside the
allowed bucket prefix is refused."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import Loader, PathNotAllowedError
from test_exactly_once import phase

BUCKET = "corpus-bucket"


class S3Server:
    """versitygw serving a directory: each folder under `root` is a bucket,
    each file an object."""

    def __init__(self, tmp: Path):
        binary = os.environ.get("DATALOADERD_S3_SERVER", "")
        if not binary or not os.path.exists(binary):
            why = f"no S3 server binary (DATALOADERD_S3_SERVER={binary!r}): run make test-python"
            if os.environ.get("CI"):
                pytest.fail(why)
            pytest.skip(why)
        self.root, meta = tmp / "s3root", tmp / "s3meta"
        self.root.mkdir()
        meta.mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        self.access, self.secret = "AK" + secrets.token_hex(6), secrets.token_hex(16)
        self.log = open(tmp / "s3.log", "w")
        self.proc = subprocess.Popen(
            [binary, "--port", f"127.0.0.1:{port}", "--access", self.access, "--secret", self.secret,
             "--region", "us-east-1", "--keep-alive", "posix", "--sidecar", str(meta), str(self.root)],
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"S3 server did not start: {(tmp / 's3.log').read_text()}")

    def environ(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The standard AWS environment the daemon started next reads."""
        for k, v in {"AWS_ACCESS_KEY_ID": self.access, "AWS_SECRET_ACCESS_KEY": self.secret,
                     "AWS_SESSION_TOKEN": "", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": self.endpoint,
                     "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(k, v)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Server]:
    server = S3Server(tmp_path)
    yield server
    server.stop()


@pytest.mark.parametrize("run_tokens", [0, 4096])
def test_exactly_once_from_object_storage(s3, daemon_factory, monkeypatch, tmp_path, run_tokens):
    s3.environ(monkeypatch)
    corpus_dir = s3.root / BUCKET / "corpus"
    corpus_dir.mkdir(parents=True)
    datasets, ranges = make_corpus(str(corpus_dir), seed=4)
    for d in datasets:  # PREFIX.bin and .idx, named as objects
        d["path"] = f"s3://{BUCKET}/corpus/" + os.path.basename(d["path"])
    daemon = daemon_factory("--allow-root", f"s3://{BUCKET}/corpus", "--allow-root", str(tmp_path),
                            "--object-block-kb", "4")
    rng = np.random.default_rng(4)
    config = {"seq_len": 17, "batch_size": 2, "seed": 4, "logical_shards": 12, "eos_id": 0, "epochs": 1,
              "run_tokens": run_tokens, "datasets": datasets}
    served, resume = [], None
    for i, size in enumerate((2, 3)):
        save = None if i == 1 else str(tmp_path / f"ckpt{i}")
        served += phase(daemon, config, f"s3p{i}", size, str(tmp_path), rng, resume_from=resume, save=save)
        resume = save
    got = np.sort(np.concatenate(served))
    want = np.arange(ranges[0][0], ranges[-1][1], dtype=np.int32)
    assert np.array_equal(got, want), (
        f"{np.setdiff1d(want, got).size} tokens never served, "
        f"{got.size - np.unique(got).size} served twice")


def test_a_dataset_outside_the_allowed_prefix_is_refused(s3, daemon_factory, monkeypatch, tmp_path):
    s3.environ(monkeypatch)
    (s3.root / BUCKET / "other").mkdir(parents=True)
    datasets, _ = make_corpus(str(s3.root / BUCKET / "other"))
    for d in datasets:
        d["path"] = f"s3://{BUCKET}/other/" + os.path.basename(d["path"])
    daemon = daemon_factory("--allow-root", f"s3://{BUCKET}/corpus")
    config = {"seq_len": 17, "batch_size": 2, "logical_shards": 4, "eos_id": 0, "datasets": datasets}
    with pytest.raises(PathNotAllowedError, match=f"s3://{BUCKET}/other/d0"):
        with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1) as loader:
            next(iter(loader))
