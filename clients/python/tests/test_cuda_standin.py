"""The cuda transport end to end on a machine without a GPU: the real daemon
binary and the client's own driver binding both load a stand-in libcuda
(internal/cuda/testdata/fakecuda.c, built here with cc) whose "device memory"
is a file under /dev/shm, so the IPC handle the daemon exports really opens in
this process. Only torch's CUDA runtime (device tensors, streams, events) is
replaced, by the small stand-in in standin_torch.py, since CI has no GPU; the
daemon's device ring, its control block, the client's IPC mapping, its
release fence and its control-block loop are the shipped code. scripts/gpu-check.sh runs the
same path on a real GPU."""

import ctypes
import gc
import glob
import os
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

from rundaemon import REPO, freeze, rings_of_other_daemons
from dataloaderd import Loader, _cuda
from standin_torch import DeviceTensor as _DeviceTensor, StandinEvent as _Event, fake_torch as _fake_torch


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the stand-in libcuda"
    lib = str(tmp_path_factory.mktemp("fakecuda") / "libcuda.so.1")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", lib,
                    os.path.join(REPO, "internal", "cuda", "testdata", "fakecuda.c")], check=True)
    return lib


@pytest.fixture
def client_standin(standin, monkeypatch):
    """This process's driver binding loads the stand-in; torch is the fake."""
    monkeypatch.setenv("DATALOADERD_CUDA_LIBRARY", standin)
    monkeypatch.setattr(_cuda, "_driver_instance", None)
    monkeypatch.setattr(_cuda, "_torch", _fake_torch)
    _Event.made = []
    yield ctypes.CDLL(standin)
    _cuda._driver_instance = None


def take(loader, n):
    out = []
    for batch in loader:
        out.append((batch["step"], np.array(batch["tokens"])))
        assert np.array_equal(np.asarray(batch["input_ids"]), out[-1][1][:, :-1])
        if len(out) == n:
            break
    return out


def device_files(pid):
    return glob.glob(f"/dev/shm/fakecuda-{pid}-*")


def device_files_gone(pid):
    """Whether the daemon's stand-in device memory is freed within 5 s (it
    frees a ring once the session's producer has stopped)."""
    for _ in range(100):
        if not device_files(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
@pytest.mark.parametrize("copy", [False, True], ids=["views", "copies"])
def test_cuda_batches_equal_shm(daemon_factory, standin, client_standin, config, fast, copy):
    d = daemon_factory("--cuda-library", standin)
    with Loader(config, dp_rank=1, dp_size=2, socket=d.socket, job="shm") as ref:
        want = take(ref, 25)
    with Loader(config, dp_rank=1, dp_size=2, socket=d.socket, job="gpu", transport="cuda",
                device=1, slots=3, fast=fast, copy=copy) as gpu:
        got = take(gpu, 25)
        assert (gpu._ctl is not None) == fast, "the control block was (not) used as asked"
        assert gpu._dev_ring.device.index == 1
        assert len(device_files(d.proc.pid)) == 1, "the daemon's device ring is not one allocation"
    assert [s for s, _ in got] == list(range(1, 26))
    for (_, w), (_, g) in zip(want, got):
        assert np.array_equal(w, g), "a batch read through the device ring differs from shm"
    # The client let go of everything it opened in the driver, and the daemon
    # freed the device ring and its control block when the session closed.
    assert client_standin.fakecuda_python_live() == 0
    assert device_files_gone(d.proc.pid), "device memory left after the session closed"
    left = set(d.rings()) - d.before - rings_of_other_daemons(d.proc.pid)
    assert not left, f"ring or control files left after the sessions closed: {sorted(left)}"


def test_cuda_resume_continues_the_run(daemon_factory, standin, client_standin, config, tmp_path):
    d = daemon_factory("--cuda-library", standin)
    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="a", transport="cuda", device=0) as a:
        whole = take(a, 30)
    ckpt = str(tmp_path / "ckpt")
    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="b", transport="cuda", device=0) as b:
        take(b, 11)
        b.save(ckpt)
    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="c", transport="cuda", device=0,
                resume_from=ckpt) as c:
        rest = take(c, 19)
    assert [s for s, _ in rest] == list(range(12, 31))
    for (_, w), (_, g) in zip(whole[11:], rest):
        assert np.array_equal(w, g), "a resumed cuda run differs from the uninterrupted one"


def test_cuda_fence_holds_slots_until_their_work_is_done(daemon_factory, standin, client_standin, config):
    # With 3 slots and the fence holding up to 2 given-up batches, the loader
    # neither deadlocks nor releases a step in the control block before the
    # event recorded when it was given up has completed.
    d = daemon_factory("--cuda-library", standin)
    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="f", transport="cuda", slots=3) as gpu:
        it = iter(gpu)
        for step in range(1, 41):
            assert next(it)["step"] == step
            # One event per given-up batch, in step order: made[k] is step k+1's.
            assert len(_Event.made) == step - 1
            released = gpu._ctl._u64[gpu._ctl._released]
            assert released <= step - 1, f"step {released} released while batch {step} is in hand"
            assert step < 4 or released >= step - 3, f"step {step}: only {released} released, the ring would stall"
            undone = [k + 1 for k in range(released) if not _Event.made[k].done()]
            assert undone == [], f"steps {undone} released before their GPU work completed"


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
def test_cuda_stuck_daemon_times_out(daemon_factory, standin, client_standin, config, fast):
    # batch_timeout on cuda: the loader gives up its fenced slots and the IPC
    # mapping without the stuck daemon's help.
    import signal

    from dataloaderd import BatchTimeoutError

    d = daemon_factory("--cuda-library", standin)
    loader = Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="stuck", transport="cuda", slots=3,
                    fast=fast, batch_timeout=1.0)
    it = iter(loader)
    assert next(it)["step"] == 1
    freeze(d.proc.pid)  # every thread stopped: no batch comes after this
    try:
        with pytest.raises(BatchTimeoutError, match="within batch_timeout=1 s") as info:
            for _ in range(10):
                next(it)
        assert loader._fence is None and loader._dev_ring is None
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    # The traceback holds the generator's frame, and so the last batch's view.
    del it, info
    gc.collect()
    assert client_standin.fakecuda_python_live() == 0, "the client kept driver objects after the timeout"


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
def test_shm_pinned_batches_equal_shm(daemon_factory, client_standin, config, fast):
    # shm-pinned: the daemon serves shm; the client registers the ring with
    # the driver, copies each batch to a fresh device tensor on its own
    # stream, and releases the shm slot only once that copy's event completed.
    d = daemon_factory()
    with Loader(config, dp_rank=1, dp_size=2, socket=d.socket, job="shm") as ref:
        want = take(ref, 25)
    with Loader(config, dp_rank=1, dp_size=2, socket=d.socket, job="pinned", transport="shm-pinned",
                device=1, slots=3, fast=fast) as pinned:
        got = []
        for batch in pinned:
            assert type(batch["tokens"]) is _DeviceTensor, "shm-pinned yields device tensors"
            got.append((batch["step"], np.array(batch["tokens"])))
            if fast:
                # One copy event per batch, in step order: made[k] is step k+1's.
                released = pinned._ctl._u64[pinned._ctl._released]
                undone = [k + 1 for k in range(released) if not _Event.made[k].done()]
                assert undone == [], f"shm slots of steps {undone} released before their copy completed"
                assert batch["step"] < 4 or released >= batch["step"] - 3, "the ring would stall"
            if len(got) == 25:
                break
        assert (pinned._ctl is not None) == fast
        assert client_standin.fakecuda_python_live() > 0, "the ring is not registered with the driver"
    assert client_standin.fakecuda_python_live() == 0, "the ring is still registered after close()"
    assert len(_Event.made) == 25, "not one copy event per batch"
    assert [s for s, _ in got] == list(range(1, 26))
    for (_, w), (_, g) in zip(want, got):
        assert np.array_equal(w, g), "a batch copied by shm-pinned differs from shm"


@pytest.mark.parametrize("fast", [True, False], ids=["control-block", "messages"])
def test_cuda_group_on_two_gpus(daemon_factory, standin, client_standin, config, fast):
    # The two ranks of a tensor-parallel group, on GPUs 0 and 1, share one
    # cuda session: each gets the group's batches in memory on its own GPU.
    d = daemon_factory("--cuda-library", standin)
    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="shm") as ref:
        want = take(ref, 20)
    kw = dict(dp_rank=0, dp_size=1, socket=d.socket, job="tp", transport="cuda", consumers=2, slots=3, fast=fast)
    with Loader(config, device=0, **kw) as a, Loader(config, device=1, **kw) as b:
        ia = iter(a)
        first = next(ia)  # the session exists, its ring on GPU 0, before rank 1 joins
        ib = iter(b)
        got = {0: [(first["step"], np.array(first["tokens"]))], 1: []}
        for _ in range(20):
            batch = next(ib)
            got[1].append((batch["step"], np.array(batch["tokens"])))
            if len(got[0]) < 20:
                batch = next(ia)
                got[0].append((batch["step"], np.array(batch["tokens"])))
        assert a._session.session_id == b._session.session_id
        assert (a._dev_ring.device.index, b._dev_ring.device.index) == (0, 1)
        assert len(device_files(d.proc.pid)) == 2, "not one device allocation per GPU of the group"
        del first, batch, ia, ib  # device views (the generators hold the last) keep their mapping open
    gc.collect()
    for rank in (0, 1):
        assert [s for s, _ in got[rank]] == list(range(1, 21))
        for (_, w), (_, g) in zip(want, got[rank]):
            assert np.array_equal(w, g), f"rank on GPU {rank} read a batch that differs from shm"
    assert client_standin.fakecuda_python_live() == 0
    assert device_files_gone(d.proc.pid), "device memory left after the group closed"


def test_shm_pinned_open_failure_leaves_nothing(daemon_factory, client_standin, config, monkeypatch):
    # torch failing after the ring was registered (here: making the copy
    # stream) raises torch's error, unregisters the ring, closes the session
    # at the daemon, and a new loader of the same job opens at once.
    d = daemon_factory()
    real = _cuda._torch

    def broken():
        t = real()
        t.cuda.Stream = lambda device=None: (_ for _ in ()).throw(RuntimeError("CUDA error: out of memory"))
        return t

    monkeypatch.setattr(_cuda, "_torch", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="p", transport="shm-pinned") as ld:
            next(iter(ld))
    assert client_standin.fakecuda_python_live() == 0, "the ring stayed registered after a failed open"
    monkeypatch.setattr(_cuda, "_torch", real)
    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="p", transport="shm-pinned") as ld:
        assert next(iter(ld))["step"] == 1


META = ["position_ids", "document_ids", "cu_seqlens", "loss_mask", "dataset_ids"]


@pytest.mark.parametrize("transport", ["cuda", "shm-pinned"])
def test_metadata_on_device_transports_equals_shm(daemon_factory, standin, client_standin, config, transport):
    # The metadata of a batch lies in the same slot as its tokens: on cuda
    # the arrays are views of the device slot, on shm-pinned views of one
    # copy of the slot's bytes; either way the same values as on shm.
    d = daemon_factory("--cuda-library", standin)
    config = dict(config, metadata=META, mask_document_boundaries=True)
    keys = ["tokens", "position_ids", "document_ids", "cu_seqlens", "line_segments", "loss_mask", "dataset_ids"]

    def batches(loader, n):
        out = []
        for batch in loader:
            out.append(({k: np.array(batch[k]) for k in keys}, batch["max_seqlen"]))
            if len(out) == n:
                return out
        return out

    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="shm") as ref:
        want = batches(ref, 12)
    with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="dev", transport=transport, device=1,
                slots=3) as dev:
        got = batches(dev, 12)
    assert len(got) == len(want) == 12
    for (w, wmax), (g, gmax) in zip(want, got):
        assert wmax == gmax
        for k in keys:
            assert w[k].dtype == g[k].dtype and np.array_equal(w[k], g[k]), f"{k} differs on {transport}"
    assert client_standin.fakecuda_python_live() == 0


@pytest.mark.parametrize("transport", ["cuda", "shm-pinned"])
def test_device_transports_go_on_through_a_daemon_restart(standin, client_standin, config, tmp_path, transport):
    # The daemon (with the stand-in driver) is killed and started again on
    # its socket: the loader maps the new session's ring anew (a device ring
    # by CUDA IPC, or the shm ring registered with the driver) and goes on
    # with the batches a run never interrupted gives.
    from test_reconnect import Supervised
    d = Supervised(tmp_path, "--cuda-library", standin)
    try:
        with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="ref") as ref:
            want = take(ref, 40)
        with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="dev", transport=transport, device=1,
                    slots=3) as dev:
            got = []
            for batch in dev:
                got.append((batch["step"], np.array(batch["tokens"])))
                if len(got) == 40:
                    break
                if len(got) in (9, 27):
                    d.kill()
                    threading.Timer(0.2, d.start).start()
            assert dev.reconnects == 2
            del batch  # a view of the last ring: it keeps that mapping, as a tensor would
        assert [s for s, _ in got] == list(range(1, 41))
        for (_, w), (_, g) in zip(want, got):
            assert np.array_equal(w, g), f"a batch on {transport} after a daemon restart differs"
        gc.collect()
        assert client_standin.fakecuda_python_live() == 0, "driver objects of the lost sessions are still held"
    finally:
        time.sleep(0.3)
        d.stop()
