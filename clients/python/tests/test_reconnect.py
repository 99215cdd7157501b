"""A daemon restart is not a training restart: the daemon is killed (-9) at
random points while a loader iterates and is started again on the same
socket after a pause, as systemd's Restart= or a Kubernetes sidecar would;
the loader waits for it, reopens its session from the state it keeps, and
yields the same batches, bit for bit, as a run whose daemon never died, with
no error raised. A daemon that does not come back within reconnect_timeout
raises DaemonUnavailableError, as before."""

from __future__ import annotations

import json
import os
import random
import signal
import socket as so
import subprocess
import threading
import time
import urllib.request

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import DaemonUnavailableError, Loader
from rundaemon import BIN


def free_port() -> int:
    with so.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Supervised:
    """The daemon on a fixed socket and shm directory, started again when asked."""

    def __init__(self, tmp_path, *extra):
        self.extra = list(extra)
        self.socket = str(tmp_path / "d.sock")
        self.shm = str(tmp_path / "shm")
        os.makedirs(self.shm, exist_ok=True)
        self.log = open(tmp_path / "daemon.log", "ab")
        self.proc = None
        self.stopped = False
        self.lock = threading.Lock()  # a start (often a test's timer thread) against stop()
        self.start()

    def start(self):
        # A restart's timer can fire, or still be polling, when the test ends
        # and stop() runs: it then starts nothing, or stops polling quietly
        # (stop() terminates what it started).
        with self.lock:
            if self.stopped:
                return
            self.port = free_port()
            self.proc = subprocess.Popen([BIN, "serve", "--socket", self.socket, "--shm-dir", self.shm,
                                          "--log-level", "warn", "--metrics-addr", f"127.0.0.1:{self.port}",
                                          *self.extra], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30  # a loaded machine starts a daemon slowly
        while time.monotonic() < deadline:
            if subprocess.run([BIN, "healthcheck", "--socket", self.socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0 or self.stopped:
                return
            time.sleep(0.02)
        raise RuntimeError("the daemon did not start within 30 s")

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def metric(self, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def stop(self):
        with self.lock:
            self.stopped = True
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def supervised(tmp_path):
    d = Supervised(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def config(tmp_path):
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 31, "batch_size": 3, "seed": 9, "logical_shards": 8, "eos_id": 0, "datasets": datasets}


@pytest.mark.parametrize("transport,sig", [("shm", signal.SIGKILL), ("inline", signal.SIGKILL),
                                           ("shm", signal.SIGTERM)], ids=["shm-kill", "inline-kill", "shm-term"])
def test_batches_go_on_through_daemon_restarts(supervised, config, transport, sig):
    # SIGKILL: a crash; SIGTERM: systemctl restart, an upgrade.
    steps = 120
    with Loader(config, socket=supervised.socket, dp_rank=1, dp_size=2, job="ref", transport=transport) as ref:
        want = [np.asarray(b["tokens"]).copy() for _, b in zip(range(steps), ref)]
    rng = random.Random(3)
    # One kill in each of four stretches, more than a ring (8 slots) apart:
    # the loader reads what the dead daemon had published, then needs the
    # restarted one.
    kills = [rng.randrange(lo, lo + 15) for lo in (5, 30, 55, 80)]
    restart = None
    got = []
    with Loader(config, socket=supervised.socket, dp_rank=1, dp_size=2, job="run", transport=transport) as loader:
        for i, batch in enumerate(loader):
            got.append(np.asarray(batch["tokens"]).copy())
            assert batch["step"] == i + 1
            if len(got) == steps:
                break
            if i in kills:
                if restart is not None:
                    restart.join()
                supervised.kill(sig)
                restart = threading.Timer(rng.uniform(0.05, 0.5), supervised.start)
                restart.start()
        restarts = loader.reconnects
        assert restart is not None
        restart.join()
    assert len(got) == steps
    assert all(np.array_equal(a, b) for a, b in zip(got, want)), "batches after a daemon restart differ"
    assert restarts == len(kills)
    assert supervised.metric("dataloaderd_reconnects_total") == 1  # the last daemon saw the last reopen
    assert supervised.metric("dataloaderd_reconnect_wait_seconds_count") == 1


def test_a_daemon_that_stays_away_still_raises(supervised, config):
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, reconnect_timeout=1.0) as loader:
        it = iter(loader)
        next(it)
        supervised.kill()
        start = time.monotonic()
        with pytest.raises(DaemonUnavailableError, match="did not come back within reconnect_timeout=1 s"):
            for _ in range(1000):
                next(it)
        assert time.monotonic() - start < 10


@pytest.mark.parametrize("after", [5, 40], ids=["before-a-kept-state", "after-a-kept-state"])
def test_after_a_reconnect_gave_up_the_loader_goes_on_from_where_it_was(supervised, config, after):
    # The daemon stays away past reconnect_timeout: next() raises. Once it is
    # back, the state the trainer saves on that failure is at the last batch
    # yielded (not the initial state a state_dict() before any batch gives),
    # and a new iteration goes on with the batch after it (40: from the state
    # kept at step 32, moved on; 5: from the start, moved on).
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="ref") as ref:
        want = [np.asarray(b["tokens"]).copy() for _, b in zip(range(after + 20), ref)]
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="run", reconnect_timeout=0.5) as loader:
        loader.state_dict()  # DCP's template, asked before the first batch
        it = iter(loader)
        for _ in range(after):
            last = next(it)["step"]
        supervised.kill()
        with pytest.raises(DaemonUnavailableError):
            for _ in range(1000):
                last = next(it)["step"]  # the batches the dead daemon had published come first
        supervised.start()
        sd = loader.state_dict()
        assert json.loads(sd["run"])["step"] == last, "the state saved after the failure is not at the last batch"
        got = [np.asarray(b["tokens"]).copy() for _, b in zip(range(5), loader)]
        assert len(got) == 5 and all(np.array_equal(g, w) for g, w in zip(got, want[last:]))


def test_reconnect_off_raises_at_once(supervised, config):
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, reconnect_timeout=0) as loader:
        it = iter(loader)
        next(it)
        supervised.kill()
        start = time.monotonic()
        with pytest.raises(DaemonUnavailableError):
            for _ in range(1000):
                next(it)
        assert time.monotonic() - start < 5


def test_save_and_state_dict_carry_on_through_a_restart(supervised, config, tmp_path):
    # save() and state_dict() called while the daemon is away wait for it,
    # reopen the session and complete, with the state of the step yielded.
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="ref") as ref:
        want = [np.asarray(b["tokens"]).copy() for _, b in zip(range(30), ref)]
    folder = str(tmp_path / "ckpt")
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="run") as loader:
        it = iter(loader)
        got = [np.asarray(next(it)["tokens"]).copy() for _ in range(10)]
        supervised.kill()
        threading.Timer(0.3, supervised.start).start()
        loader.save(folder)
        supervised.kill()
        threading.Timer(0.3, supervised.start).start()
        sd = loader.state_dict()
        got += [np.asarray(next(it)["tokens"]).copy() for _ in range(10)]
        assert loader.reconnects == 2
    assert all(np.array_equal(a, b) for a, b in zip(got, want[:20]))
    time.sleep(0.5)
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="again", resume_from=folder) as again:
        assert np.array_equal(np.asarray(next(iter(again))["tokens"]), want[10])
    fresh = Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="dcp")
    fresh.load_state_dict(sd)
    with fresh:
        assert np.array_equal(np.asarray(next(iter(fresh))["tokens"]), want[10])


def test_a_restart_after_load_state_dict_goes_on_from_the_loaded_state(supervised, config):
    # A loader that read 40 batches (it kept its state at step 32) loads the
    # state of step 5 and reads on; a restart then reopens the session from
    # the loaded state, not from the one kept of the run it left.
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="ref") as ref:
        want = [np.asarray(b["tokens"]).copy() for _, b in zip(range(30), ref)]
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="sd") as first:
        it = iter(first)
        for _ in range(5):
            next(it)
        sd = first.state_dict()
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="run") as loader:
        it = iter(loader)
        for _ in range(40):
            next(it)
        loader.load_state_dict(sd)
        it = iter(loader)
        got = [np.asarray(next(it)["tokens"]).copy() for _ in range(3)]
        supervised.kill()
        restart = threading.Timer(0.2, supervised.start)
        restart.start()
        got += [np.asarray(next(it)["tokens"]).copy() for _ in range(20)]  # past the ring's 8 slots
        assert loader.reconnects == 1 and loader.step == 28
        restart.join()  # its start() done before the fixture stops the daemon
    assert len(got) == 23 and all(np.array_equal(a, b) for a, b in zip(got, want[5:28]))


VOCAB = os.environ.get("DATALOADERD_TOKENIZER_VOCAB", "")


@pytest.mark.skipif(not os.path.exists(os.path.join(VOCAB, "r50k_base.tiktoken")) and os.environ.get("CI") != "true",
                    reason="set DATALOADERD_TOKENIZER_VOCAB (make test does) to the rank files")
def test_text_on_the_fly_goes_on_through_restarts(tmp_path):
    # A restarted daemon tokenizes again what the reopened session reads.
    d = Supervised(tmp_path, "--tokenizer-dir", VOCAB)
    try:
        rng = random.Random(5)
        words = ["the", "loader", "ранг", "token", "42", "é", "don't"]
        with open(tmp_path / "a.jsonl", "w") as f:
            for _ in range(400):
                f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(1, 200)))}) + "\n")
        config = {"seq_len": 63, "batch_size": 2, "seed": 2, "logical_shards": 2, "eos_id": 50256,
                  "datasets": [{"name": "a", "path": str(tmp_path / "a.jsonl"), "format": "jsonl",
                                "tokenizer": "r50k_base"}]}
        steps = 70
        with Loader(config, socket=d.socket, dp_rank=0, dp_size=1, job="ref") as ref:
            want = [np.asarray(b["tokens"]).copy() for _, b in zip(range(steps), ref)]
        got = []
        with Loader(config, socket=d.socket, dp_rank=0, dp_size=1, job="run") as loader:
            for i, batch in enumerate(loader):
                got.append(np.asarray(batch["tokens"]).copy())
                if len(got) == steps:
                    break
                if i in (12, 40):
                    d.kill()
                    time.sleep(0.2)
                    d.start()
            assert loader.reconnects == 2
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    finally:
        d.stop()


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
def test_a_group_goes_on_through_daemon_restarts(supervised, config, fast):
    # Two consumers of one session (a tensor-parallel pair), each in its own
    # thread as in their own processes, one or two steps apart when the
    # daemon dies: the first back reopens the session from the state it kept
    # before its latest, the other joins it, and each reads on to its own
    # step: both get the uninterrupted run's batches.
    steps = 110
    with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="ref") as ref:
        want = [np.asarray(b["tokens"]).copy() for _, b in zip(range(steps), ref)]
    got = {0: [], 1: []}
    errors = []
    killed = threading.Event()

    def consumer(c):
        try:
            with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="tp", consumers=2,
                        fast=fast) as loader:
                for batch in loader:
                    got[c].append(np.asarray(batch["tokens"]).copy())
                    n = len(got[c])
                    if c == 0 and n in (45, 90):
                        supervised.kill()
                        threading.Timer(0.3, supervised.start).start()
                        killed.set()
                    if c == 1 and n in (44, 89):
                        time.sleep(0.05)  # one step behind when the daemon dies
                    if n == steps:
                        break
                got[c].append(loader.reconnects)
        except Exception as e:  # reported below, with the other thread's
            errors.append(f"consumer {c}: {e!r}")

    threads = [threading.Thread(target=consumer, args=(c,)) for c in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert killed.is_set()
    for c in (0, 1):
        reconnects = got[c].pop()
        assert reconnects == 2, (c, reconnects)
        assert len(got[c]) == steps
        assert all(np.array_equal(a, b) for a, b in zip(got[c], want)), f"consumer {c}'s batches differ"
