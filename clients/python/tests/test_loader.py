"""The Loader against the real daemon: determinism, resume, transports,
mixing, tensor-parallel consumers, state dicts, zero copy, reclaiming."""

import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import grpc

import numpy as np
import pytest

from corpus import make_corpus
import dataloaderd.loader as loader_module
from dataloaderd import DataloaderdError, Loader, SessionExistsError, StateError


def take(loader, n):
    out = []
    for batch in loader:
        out.append((batch["step"], np.array(batch["tokens"])))
        if len(out) == n:
            break
    return out


def same(a, b):
    return len(a) == len(b) and all(sa == sb and np.array_equal(ta, tb) for (sa, ta), (sb, tb) in zip(a, b))


def test_determinism_and_resume(daemon, config, tmp_path):
    with Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="x") as a:
        first = take(a, 20)
    with Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="y") as b:
        assert same(take(b, 20), first), "two runs of one config differ"
    ckpt = str(tmp_path / "ckpt")
    with Loader(config, dp_rank=0, dp_size=2, socket=daemon.socket, job="z0") as r0, \
            Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="z") as r1:
        take(r0, 3)
        take(r1, 8)
        r0.save(ckpt)
        path = r1.save(ckpt)
        assert path.endswith(os.path.join("dataloader", "rank-1-of-2.json"))
    with Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="w", resume_from=ckpt) as c:
        resumed = take(c, 12)
    assert [s for s, _ in resumed] == list(range(9, 21))
    assert same(resumed, first[8:]), "resumed run differs from the uninterrupted one"


def test_every_path_serves_the_same_batches(daemon, config):
    # shm through the control block, shm announced by messages, and inline;
    # to the end of the run, with a small ring so the producer waits.
    config = {**config, "epochs": 1}
    with Loader(config, socket=daemon.socket, job="s", dp_rank=0, dp_size=1, slots=2) as s, \
            Loader(config, socket=daemon.socket, job="m", dp_rank=0, dp_size=1, fast=False) as m, \
            Loader(config, socket=daemon.socket, job="i", dp_rank=0, dp_size=1, transport="inline") as i:
        a, b, c = take(s, 10**6), take(m, 10**6), take(i, 10**6)
        assert s._ctl is not None and m._ctl is None
        assert len(a) > 5 and same(a, b) and same(a, c)


def test_control_block_consumers_and_resume(daemon, config, tmp_path):
    # Two consumers of one dp_rank read through the control block: each sees
    # every batch; a slot is reused only after both released it; the state
    # saved by one resumes after its step.
    ref = take(Loader(config, socket=daemon.socket, job="ref", dp_rank=0, dp_size=1, fast=False), 30)
    a = Loader(config, socket=daemon.socket, job="tp", dp_rank=0, dp_size=1, consumers=2, slots=3)
    b = Loader(config, socket=daemon.socket, job="tp", dp_rank=0, dp_size=1, consumers=2, slots=3)
    ia, ib = iter(a), iter(b)
    got_a, got_b = [], []
    for _ in range(20):  # interleaved, so neither runs more than the ring ahead
        x, y = next(ia), next(ib)
        got_a.append((x["step"], np.array(x["tokens"])))
        got_b.append((y["step"], np.array(y["tokens"])))
    assert same(got_a, ref[:20]) and same(got_b, ref[:20])
    a.save(str(tmp_path / "ck"))
    a.close()
    b.close()
    with Loader(config, socket=daemon.socket, job="tp2", dp_rank=0, dp_size=1,
                resume_from=str(tmp_path / "ck")) as c:
        assert same(take(c, 10), ref[20:30])


def test_zero_copy_views(daemon, config):
    # tokens is a read-only view of the ring; with dtype="int32" input_ids,
    # labels and shift_labels are views of it too (no torch here: numpy).
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, dtype="int32") as loader:
        batch = next(iter(loader))
        tokens = batch["tokens"]
        assert not tokens.flags.writeable and not tokens.flags.owndata
        base = tokens
        while isinstance(base, np.ndarray):
            base = base.base
        owner = base.obj if isinstance(base, memoryview) else base
        assert isinstance(owner, mmap.mmap), f"tokens are not a view of the ring: {type(owner)}"
        assert np.shares_memory(batch["input_ids"], tokens)
        assert np.array_equal(np.asarray(batch["shift_labels"])[:, :-1], np.asarray(batch["input_ids"])[:, 1:])
        with pytest.raises(ValueError, match="read-only"):
            batch["labels"][0, 0] = -100
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, copy=True, job="c") as loader:
        assert next(iter(loader))["tokens"].flags.owndata


def test_mixing_follows_weights(daemon, tmp_path):
    datasets, ranges = make_corpus(str(tmp_path))
    datasets[0]["weight"], datasets[1]["weight"] = 3.0, 1.0
    config = {"seq_len": 15, "batch_size": 4, "seed": 2, "logical_shards": 8, "eos_id": 0, "datasets": datasets}
    for rank in range(2):
        lines = np.zeros(2, dtype=np.int64)
        with Loader(config, dp_rank=rank, dp_size=2, socket=daemon.socket) as loader:
            for n, batch in enumerate(loader, 1):
                for line in batch["tokens"]:
                    data = line[line != 0]
                    assert data.size, "a line without corpus tokens"
                    lines[0 if data[0] < ranges[0][1] else 1] += 1
                    total = lines.sum()
                    assert abs(lines[0] - 0.75 * total) <= 1 and abs(lines[1] - 0.25 * total) <= 1, \
                        (rank, batch["step"], lines)
                if n == 100:
                    break
        assert lines.sum() == 400


def test_tensor_parallel_consumers(daemon, config):
    kw = dict(dp_rank=0, dp_size=1, socket=daemon.socket, job="tp", consumers=2)
    a, b = Loader(config, **kw), Loader(config, **kw)
    ia, ib = iter(a), iter(b)
    with pytest.raises(SessionExistsError, match="2 consumers"):
        iter(Loader(config, **kw))
    for _ in range(10):
        x, y = next(ia), next(ib)
        assert x["step"] == y["step"] and np.array_equal(x["tokens"], y["tokens"])
    a.close()
    b.close()


def test_killed_client_is_reclaimed(daemon_factory, config):
    # With --keep-detached 0 a dead process's session is reclaimed at once;
    # by default it is kept for a new process to go on (test_rank_restart.py).
    daemon = daemon_factory("--keep-detached", "0")
    script = textwrap.dedent(f"""
        import os, signal
        from dataloaderd import Loader
        loader = Loader({config!r}, dp_rank=0, dp_size=1, socket={daemon.socket!r}, job="k")
        it = iter(loader)
        next(it); next(it)
        print(loader.ring_path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr
    ring = p.stdout.strip()
    assert ring.startswith("/dev/shm/dataloaderd-"), p.stdout
    deadline = time.time() + 10
    while True:
        try:
            again = Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="k")
            first = next(iter(again))
            break
        except SessionExistsError:
            again.close()
            assert time.time() < deadline, "the dead client's session was never reclaimed"
            time.sleep(0.1)
    with again:
        assert first["step"] == 1
        assert again.ring_path != ring
    while os.path.exists(ring) and time.time() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(ring), "the dead client's ring file is still in /dev/shm"


def test_daemon_stopping_mid_iteration_raises_package_error(daemon_factory, config):
    # reconnect_timeout=0: no waiting for a restarted daemon (test_reconnect.py).
    d = daemon_factory()
    loader = Loader(config, dp_rank=0, dp_size=1, socket=d.socket, reconnect_timeout=0)
    it = iter(loader)
    next(it)
    d.stop()
    with pytest.raises(DataloaderdError) as info:
        for _ in range(100):
            next(it)
    assert not isinstance(info.value, grpc.RpcError)
    loader.close()
    loader.close()


def test_torch_tensors_without_warnings(daemon, config, monkeypatch):
    # torch is not installed here: a stand-in checks what the loader hands it:
    # writable arrays only (torch warns of, and would crash on writing into,
    # read-only memory): an int64 copy by default, and with dtype="int32"
    # copy-on-write views of the ring.
    seen = []

    class FakeTorch:
        @staticmethod
        def from_numpy(a):
            if not a.flags.writeable:
                warnings.warn("The given NumPy array is not writable", UserWarning)
            seen.append(a)
            return a

    monkeypatch.setattr(loader_module, "torch", FakeTorch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket) as loader:
            batch = next(iter(loader))
            # One int64 array per batch (one conversion of the slot's tokens), whose
            # planes the three keys are: contiguous, no two sharing memory.
            assert [a.dtype for a in seen] == [np.int64]
            keys = [batch[k] for k in ("input_ids", "labels", "shift_labels")]
            assert all(a.flags.c_contiguous for a in keys)
            assert not any(np.shares_memory(a, b) for i, a in enumerate(keys) for b in keys[i + 1:])
            assert np.array_equal(batch["input_ids"], batch["tokens"][:, :-1])
            assert np.array_equal(batch["labels"], batch["input_ids"])
            assert np.array_equal(batch["shift_labels"], batch["tokens"][:, 1:])
        seen.clear()
        with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, dtype="int32", job="v") as loader:
            it = iter(loader)
            batch = next(it)
            assert [a.dtype for a in seen] == [np.int32] * 3
            assert np.array_equal(batch["input_ids"], batch["tokens"][:, :-1])
            got = [np.array(batch["tokens"])]
            batch["labels"][:] = -100  # copy-on-write: never reaches the ring
            assert (batch["input_ids"] == -100).all()  # labels is input_ids itself under int32
            got += [np.array(next(it)["tokens"]) for _ in range(20)]  # the written slot comes round again
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, dtype="int32", job="w") as again:
        want = [np.array(b["tokens"]) for _, b in zip(range(21), again)]
    assert all(np.array_equal(g, w) for g, w in zip(got, want)), "a write reached the ring or a later batch"


def test_process_exiting_without_close_does_not_hang(daemon, config):
    script = textwrap.dedent(f"""
        from dataloaderd import Loader
        loader = Loader({config!r}, dp_rank=0, dp_size=1, socket={daemon.socket!r}, job="exit")
        it = iter(loader)
        next(it); next(it)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="exit") as again:
        assert next(iter(again))["step"] == 1


@pytest.mark.parametrize("fast", [True, False])
def test_close_frees_the_batch_stream_under_a_live_iterator(daemon, config, fast):
    # A loader closed (at exit, say) while an iterator of it is still
    # referenced must free its Batches call then: freed during interpreter
    # finalization instead, the call's __del__ can wait forever on a lock a
    # frozen gRPC thread holds (the exit hang above, in some runs).
    import gc
    import weakref
    loader = Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, fast=fast)
    it = iter(loader)
    next(it)
    call = weakref.ref(loader._live.feed._stream.responses)
    loader.close()
    deadline = time.monotonic() + 5  # message mode: the batch-timeout watcher lets go within a second
    while call() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert call() is None, "the Batches call outlived close() while an iterator was alive"
    del it


def test_control_block_stress_many_consumers_small_ring(daemon, config):
    # Four consumers of one dp_rank in threads with random pauses, a 2-slot
    # ring (the producer waits on almost every release): every consumer reads
    # every batch in order and the run ends without a stall.
    import random
    import threading
    config = {**config, "epochs": 1}
    ref = take(Loader(config, socket=daemon.socket, job="ref", dp_rank=0, dp_size=1, fast=False), 10**6)
    loaders = [Loader(config, socket=daemon.socket, job="st", dp_rank=0, dp_size=1, consumers=4, slots=2)
               for _ in range(4)]
    got, errors = [None] * 4, []

    def consume(i):
        rng = random.Random(i)
        try:
            out = []
            for batch in loaders[i]:
                out.append((batch["step"], np.array(batch["tokens"])))
                if rng.random() < 0.3:
                    time.sleep(rng.random() * 0.002)
            got[i] = out
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for ld in loaders:
        ld.close()
    assert not errors, errors
    assert time.time() - start < 120, "consumers stalled"
    for i in range(4):
        assert got[i] is not None and same(got[i], ref), f"consumer {i} read {len(got[i] or [])} of {len(ref)} batches"


def test_metrics_count_control_block_waits_and_batches(daemon_factory, config):
    # The waits a control-block client counts in shared memory reach the
    # daemon's histogram, alongside the stream clients' reported waits.
    from rundaemon import free_port, scrape as scrape_port
    port = free_port()
    d = daemon_factory("--metrics-addr", f"127.0.0.1:{port}")

    def scrape():
        return scrape_port(port)

    with Loader(config, socket=d.socket, dp_rank=0, dp_size=1, job="fast") as a:
        take(a, 12)
        live = scrape()  # read from the open session's control block
    assert live["dataloaderd_client_wait_seconds_count"] >= 11, live
    closed = scrape()["dataloaderd_client_wait_seconds_count"]  # the first session's, folded in at close
    with Loader(config, socket=d.socket, dp_rank=0, dp_size=1, job="msg", fast=False) as b:
        take(b, 5)
        # Batches 1-4 are released by messages that travel on their own
        # thread: wait for the daemon to have them, before close drops them.
        deadline = time.time() + 10
        while scrape()["dataloaderd_client_wait_seconds_count"] < closed + 4:
            assert time.time() < deadline, scrape()
            time.sleep(0.05)
    after = scrape()
    # 12 + 5 batches taken; the last of each is released at close or not at all.
    assert after["dataloaderd_client_wait_seconds_count"] >= 11 + 4, after
    assert after["dataloaderd_batches_served_total"] >= 17
    assert after["dataloaderd_sessions"] == 0
