"""Bad input gets the package's own exception, naming the thing at fault."""

import json
import os
import socket
import subprocess

import grpc
import pytest

from rundaemon import BIN, freeze
from dataloaderd import TransportUnavailableError
from dataloaderd._proto import dataloader_pb2 as pb
from dataloaderd._proto import dataloader_pb2_grpc as pb_grpc
from dataloaderd.config import to_proto
from corpus import make_corpus
from dataloaderd import (ConfigError, DaemonUnavailableError, Loader, PathNotAllowedError,
                         SessionExistsError, StateError)


@pytest.fixture
def config(tmp_path):
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 31, "batch_size": 2, "seed": 5, "logical_shards": 8, "eos_id": 0, "datasets": datasets}


def first(loader):
    with loader:
        return next(iter(loader))


@pytest.mark.parametrize("edit,kw,match", [
    (lambda c: c.update(seq_len=0), {}, "seq_len must be at least 1"),
    (lambda c: c["datasets"][0].update(path="/nonexistent/corpus"), {}, "/nonexistent/corpus"),
    (lambda c: c["datasets"][0].update(format="csv"), {}, 'unknown format "csv" \\(want megatron, tokens, arrow, parquet, jsonl\\)'),
    (lambda c: c["datasets"][0].update(format="parquet"), {}, "format parquet is tokenized on the fly and needs a tokenizer"),
    (lambda c: [d.update(weight=0) for d in c["datasets"]], {}, "every weight is zero"),
    (lambda c: c["datasets"][1].update(weight=-2.0), {}, "weight must be a finite number >= 0"),
    (lambda c: c.update(logical_shards=2), {"dp_size": 4, "dp_rank": 3}, r"logical_shards \(2\) must be at least dp_size \(4\)"),
])
def test_daemon_refuses_bad_config(daemon, config, edit, kw, match):
    edit(config)
    args = {"dp_rank": 0, "dp_size": 1, **kw}
    with pytest.raises(ConfigError, match=match):
        first(Loader(config, socket=daemon.socket, **args))


def test_client_side_checks(daemon, config):
    with pytest.raises(ConfigError, match="unknown key 'seqlen'"):
        Loader({**config, "seqlen": 4}, socket=daemon.socket)
    with pytest.raises(ConfigError, match="'batch_size' has the wrong type"):
        Loader({**config, "batch_size": "8"}, socket=daemon.socket)
    with pytest.raises(ConfigError, match="dp_rank 2 is out of range for dp_size 2"):
        Loader(config, dp_rank=2, dp_size=2, socket=daemon.socket)
    with pytest.raises(DaemonUnavailableError, match="no daemon socket at /nonexistent.sock"):
        Loader(config, socket="/nonexistent.sock")


def test_nothing_listening_on_the_socket(config, tmp_path):
    path = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()  # the file stays, nobody answers: connection refused
    with pytest.raises(DaemonUnavailableError, match="stale.sock"):
        first(Loader(config, socket=path, dp_rank=0, dp_size=1))


def test_config_file(daemon, config, tmp_path):
    # Relative dataset paths resolve against the config file's directory.
    for d in config["datasets"]:
        d["path"] = os.path.relpath(d["path"], tmp_path)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    assert first(Loader(str(path), socket=daemon.socket, dp_rank=0, dp_size=1))["tokens"].shape == (2, 32)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json"):
        Loader(str(bad), socket=daemon.socket)


def test_duplicate_session(daemon, config):
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="dup") as a:
        next(iter(a))
        with pytest.raises(SessionExistsError, match="duplicate session"):
            first(Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="dup"))


def test_resume_from_another_corpus(daemon, config, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="one") as a:
        next(iter(a))
        a.save(ckpt)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other, _ = make_corpus(str(other_dir), seed=9)
    changed = {**config, "datasets": other, "seq_len": 63}
    with pytest.raises(StateError, match="seq_len is 31 in the saved state, 63 now"):
        first(Loader(changed, dp_rank=0, dp_size=1, socket=daemon.socket, job="two", resume_from=ckpt))
    with pytest.raises(StateError, match='dataset "d0": files differ'):
        first(Loader({**config, "datasets": other}, dp_rank=0, dp_size=1, socket=daemon.socket,
                     job="three", resume_from=ckpt))


def test_allow_root(daemon_factory, config, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    d = daemon_factory("--allow-root", str(root))
    with pytest.raises(PathNotAllowedError, match="not under any --allow-root"):
        first(Loader(config, dp_rank=0, dp_size=1, socket=d.socket))


def test_socket_path_too_long(tmp_path):
    long = str(tmp_path / ("s" * 120))
    p = subprocess.run([BIN, "serve", "--socket", long], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "longer than the 107" in p.stderr


def test_cuda_transport_without_a_gpu(daemon, config):
    # On a machine without torch+CUDA the client refuses cuda and shm-pinned
    # before asking the daemon; a daemon without a CUDA driver refuses too, with Unimplemented.
    for transport in ("cuda", "shm-pinned"):
        with pytest.raises(TransportUnavailableError, match="transport='shm'"):
            first(Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, transport=transport))
    with grpc.insecure_channel("unix://" + daemon.socket) as ch:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.LoaderStub(ch).OpenSession(pb.OpenSessionRequest(
                job="c", config=to_proto(config, "/"), dp_rank=0, dp_size=1, transport=pb.TRANSPORT_CUDA), timeout=30)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "shm and inline transports work without a GPU" in info.value.details()


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
def test_stuck_daemon_times_out(daemon, config, fast):
    # A daemon that stops answering (SIGSTOP, as a hung filesystem would leave
    # it) makes next() raise BatchTimeoutError after batch_timeout, instead of
    # hanging the trainer; the loader is then closed, and once the daemon runs
    # again it reclaims the session, so a new loader can take the rank.
    import signal
    import time

    from dataloaderd import BatchTimeoutError, DataloaderdError

    loader = Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="stuck", fast=fast,
                    batch_timeout=1.0, slots=2)
    it = iter(loader)
    next(it)
    freeze(daemon.proc.pid)  # every thread stopped: no batch comes after this
    try:
        start = time.monotonic()
        with pytest.raises(BatchTimeoutError, match=r"within batch_timeout=1 s .* job 'stuck', dp_rank 0") as info:
            for _ in range(10):  # the batches already in the ring come first
                next(it)
        assert time.monotonic() - start < 5, "the timeout took far longer than batch_timeout"
        assert isinstance(info.value, TimeoutError)
        with pytest.raises(DataloaderdError, match="closed"):
            loader.save("/tmp/never")
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while True:
        try:
            with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="stuck") as again:
                assert next(iter(again))["step"] == 1
            break
        except SessionExistsError:
            assert time.monotonic() < deadline, "the timed-out session was never reclaimed"
            time.sleep(0.1)


def test_batch_timeout_must_be_positive(daemon, config):
    with pytest.raises(ConfigError, match="batch_timeout must be > 0"):
        Loader(config, socket=daemon.socket, batch_timeout=0)


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
def test_session_closed_by_another_client(daemon, config, fast):
    # Another process of the job closes the session by its id while this
    # loader reads it: the loader says the session is gone and who ended it,
    # not that the daemon is unavailable (it is not).
    from dataloaderd import SessionNotFoundError
    loader = Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, fast=fast, job="closed-by-another")
    with loader:
        it = iter(loader)
        next(it)
        sid = loader._session.session_id
        with grpc.insecure_channel("unix://" + daemon.socket) as ch:
            pb_grpc.LoaderStub(ch).CloseSession(pb.CloseSessionRequest(session_id=sid, consumer=0), timeout=30)
        with pytest.raises(SessionNotFoundError, match=f'session "{sid}" was closed by its consumers'):
            for _ in range(1000):
                next(it)


def test_ring_budget(tmp_path, config):
    # A daemon's rings share one memory budget: a session past it is refused
    # with ResourceExhaustedError naming the flag, and closing a session
    # makes room again.
    from dataloaderd import ResourceExhaustedError
    from rundaemon import Daemon
    d = Daemon(tmp_path, extra=["--ring-budget-mb", "1"])
    try:
        big = dict(config, seq_len=4095, batch_size=8)  # 8 x 4096 x 4 B = 128 KiB a slot: 768 KiB a ring, one fits in 1 MiB
        first_loader = Loader(big, socket=d.socket, dp_rank=0, dp_size=2, slots=6, job="budget")
        next(iter(first_loader))
        with pytest.raises(ResourceExhaustedError, match="--ring-budget-mb"):
            first(Loader(big, socket=d.socket, dp_rank=1, dp_size=2, slots=6, job="budget"))
        first_loader.close()
        assert first(Loader(big, socket=d.socket, dp_rank=1, dp_size=2, slots=6, job="budget")) is not None
    finally:
        d.stop()


def test_config_too_large(daemon, config):
    # A config past gRPC's message limit is a ConfigError that says how to
    # shrink it, not the ResourceExhaustedError of a daemon out of memory.
    huge = dict(config, datasets=[dict(config["datasets"][0], name=f"d{i}-" + "x" * 1000) for i in range(5000)])
    with pytest.raises(ConfigError, match="too large for the daemon.*under 4 MiB"):
        first(Loader(huge, socket=daemon.socket, dp_rank=0, dp_size=1))
