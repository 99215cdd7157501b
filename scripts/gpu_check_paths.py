"""scripts/gpu_check.py, the delivery paths: the client half of CUDA IPC on
its own, bit-identity of every path against shm, and what each path costs
(first batch, GB/s onto the GPU, next() under a training step)."""
import os
import re
import subprocess
import sys
import textwrap
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, cast

import numpy as np
import numpy.typing as npt

from dataloaderd import Loader, Transport, _cuda
from dataloaderd._torchapi import Tensor
from gpu_check_report import check, results

if TYPE_CHECKING:
    import torch as torch_types  # Any where torch is not installed (mypy.ini)

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src")
Step = Callable[[], Any]


def as_torch(t: Tensor) -> "torch_types.Tensor":
    """A tensor the client made, as the torch tensor it is (the client's own
    annotations name only the part of torch it uses)."""
    return cast("torch_types.Tensor", t)


# The child of the IPC self-test: allocate, fill with a pattern, export.
_IPC_CHILD = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, sys.argv[1])
    from dataloaderd import _cuda
    dev, n = int(sys.argv[2]), int(sys.argv[3])
    d = _cuda._Driver()
    lib = d._lib
    ctx = d.retain(dev)
    with d.in_context(ctx):
        p = ctypes.c_ulonglong()
        assert lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
        src = (ctypes.c_ubyte * n)(*[(i * 7 + 3) & 0xFF for i in range(n)])
        assert lib.cuMemcpyHtoD_v2(p, src, ctypes.c_size_t(n)) == 0
        h = _cuda._IpcHandle()
        assert lib.cuIpcGetMemHandle(ctypes.byref(h), p) == 0
    print(ctypes.string_at(ctypes.addressof(h), 64).hex(), flush=True)
    sys.stdin.readline()
    with d.in_context(ctx):
        lib.cuMemFree_v2(p)
    d.release(dev)
""")

def ipc_selftest(torch: ModuleType, device: int) -> None:
    n, stride = 3 * 4096, 4096
    child = subprocess.Popen([sys.executable, "-c", _IPC_CHILD, CLIENT, str(device), str(n)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        handle = bytes.fromhex(child.stdout.readline().strip())
        ring = _cuda.IpcRing(handle, slots=3, stride=stride, line_tokens=8, device=device)
        want = torch.tensor([(i * 7 + 3) & 0xFF for i in range(n)], dtype=torch.uint8)
        got = torch.cat([as_torch(ring.slot_bytes(i, stride)).cpu() for i in range(3)])
        check(torch.equal(got, want), "IpcRing slot views hold the exporter's bytes")
        b = as_torch(ring.batch(1, 2))
        check(b.shape == (2, 8) and b.is_cuda and b.dtype == torch.int32, "batch() is an int32 device view")
        del b
        ring.close()
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=60)


def shm_reference(config: Dict[str, Any], sock: str, batches: int) -> List[npt.NDArray[np.int32]]:
    with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="shm", copy=True, job="gpucheck-ref") as ld:
        out = []
        for b in ld:
            out.append(b["tokens"])
            if len(out) == batches:
                break
    check(len(out) == batches, f"{len(out)} reference batches")
    return out


class Path:
    """One way of getting batches onto the GPU, as a trainer would use it:
    batches() opens a loader and yields int32 device tensors."""

    def __init__(self, name: str, torch: ModuleType, config: Dict[str, Any], sock: str, device: int, transport: Transport,
                 fast: bool = True, copy: bool = False, to_device: bool = False):
        self.name, self.torch, self.config, self.sock, self.device = name, torch, config, sock, device
        self.dev = torch.device("cuda", device)
        self.transport, self.fast, self.copy, self.to_device = transport, fast, copy, to_device
        self.tag = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")

    def batches(self, job: str) -> Generator["torch_types.Tensor", None, None]:
        """(tokens on the device, step) per batch; the time until a tensor is
        in hand is the caller's to take around next()."""
        with Loader(self.config, dp_rank=0, dp_size=1, socket=self.sock, transport=self.transport, job=job,
                    device=self.device, fast=self.fast, copy=self.copy) as ld:
            for b in ld:
                tok = b["tokens"]
                if self.to_device:  # shm, then a plain pageable copy: what a trainer does without us
                    tok = self.torch.from_numpy(tok).to(self.dev)
                yield tok


def paths(torch: ModuleType, config: Dict[str, Any], sock: str, device: int) -> List[Path]:
    a = (torch, config, sock, device)
    return [Path("shm + .to(device)", *a, "shm", to_device=True),
            Path("shm-pinned", *a, "shm-pinned"),
            Path("cuda, control block", *a, "cuda"),
            Path("cuda, messages", *a, "cuda", fast=False)]


def bit_identity(path: Path, ref: List[npt.NDArray[np.int32]]) -> None:
    torch = path.torch
    same, count = True, 0
    for i, tok in enumerate(path.batches(f"same-{path.tag}")):
        count += 1
        same = same and tok.is_cuda and tok.dtype == torch.int32 and torch.equal(tok.cpu(), torch.from_numpy(ref[i]))
        if count == len(ref):
            break
    check(same and count == len(ref), f"{path.name}: {count} batches on the device, bit-identical to shm")


def group(torch: ModuleType, config: Dict[str, Any], sock: str, ref: List[npt.NDArray[np.int32]]) -> None:
    """The two ranks of a tensor-parallel group share one cuda session, on
    GPUs 0 and 1 (both on 0 with one GPU): each reads exactly the reference
    batches, on its own GPU."""
    devices = (0, 1 if torch.cuda.device_count() > 1 else 0)

    def consumer(device: int) -> Loader:
        return Loader(config, dp_rank=0, dp_size=1, socket=sock, job="gpucheck-group", transport="cuda",
                      consumers=2, device=device)

    same, got = True, [0, 0]
    with consumer(devices[0]) as a, consumer(devices[1]) as b:
        its = [iter(a), iter(b)]
        for i in range(len(ref)):
            for r in (0, 1):
                tok = next(its[r])["tokens"]
                assert not isinstance(tok, np.ndarray), "cuda batches are device tensors"
                same = same and tok.device.index == devices[r] and torch.equal(tok.cpu(), torch.from_numpy(ref[i]))
                got[r] += 1
    check(same and got == [len(ref)] * 2,
          f"a group of 2 consumers on GPUs {devices}: {got} batches, each on its GPU, bit-identical to shm")


def measure(path: Path, n: int, step: Step, alone: Callable[[], float], nbytes_each: int,
            warm: int = 20) -> Dict[str, Any]:
    """One session of a path: the time to its first batch on the device; then,
    after warm batches, the rate at which it lands batches on the GPU with one
    kernel reading each; then the time each next() (and for shm + .to(), its
    copy) takes under a training step of GPU work the trainer synchronizes on
    (loss.item() each step)."""
    torch, dev = path.torch, path.dev
    out: Dict[str, Any] = {}
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    it = path.batches(f"measure-{path.tag}")
    first = next(it)
    first.sum().item()
    out["first_batch_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    for _ in range(warm):
        next(it)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        next(it).sum()
    torch.cuda.synchronize(dev)
    out["gbps"] = n * nbytes_each / (time.perf_counter() - t0) / 1e9
    waits = []
    for _ in range(n):
        t0 = time.perf_counter()
        tok = next(it)
        waits.append(time.perf_counter() - t0)
        tok.sum()
        step()
        torch.cuda.synchronize(dev)
    # Does the GPU ever wait? The trainer runs ahead (no sync per step), as
    # real ones do between logging steps; against the same steps with no
    # loader just before and after (the GPU's clock moves with its load).
    before = alone()
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        next(it).sum()
        step()
    torch.cuda.synchronize(dev)
    out["steps_ratio"] = (time.perf_counter() - t0) / ((before + alone()) / 2)
    it.close()
    w = sorted(waits)
    out["wait_us"] = {"p50": round(w[len(w) // 2] * 1e6, 1), "p99": round(w[max(0, int(len(w) * 0.99) - 1)] * 1e6, 1),
                      "max": round(w[-1] * 1e6, 1)}
    return out


def torch_baseline(torch: ModuleType, device: int, ref: List[npt.NDArray[np.int32]],
                   repeats: int = 3) -> Dict[str, float]:
    """Host-to-device GB/s of the same bytes by plain torch: one copy per batch
    from pageable and from pinned memory, and all batches as one pinned copy."""
    dev = torch.device("cuda", device)
    host = [torch.from_numpy(t) for t in ref]
    pinned = [t.pin_memory() for t in host]
    whole = torch.cat(host).pin_memory()
    rates = {}
    for name, src, nb in (("torch pageable .to() per batch", host, False),
                          ("torch pinned non_blocking per batch", pinned, True),
                          ("torch pinned, one large copy", [whole], True)):
        best = []
        for _ in range(repeats):
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            for t in src:
                t.to(dev, non_blocking=nb)
            torch.cuda.synchronize(dev)
            best.append(sum(t.numel() * 4 for t in src) / (time.perf_counter() - t0) / 1e9)
        rates[name] = sorted(best)[len(best) // 2]
    return rates


def host_rate(config: Dict[str, Any], sock: str, n: int, nbytes_each: int) -> float:
    """shm with no device copy: how fast the daemon fills the ring here."""
    with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="shm", job="gpucheck-host") as ld:
        it = iter(ld)
        for _ in range(21):  # as measure(): the first batch and 20 more before the clock starts
            next(it)
        t0 = time.perf_counter()
        got = 0
        for _ in range(n):
            try:
                b = next(it)
            except StopIteration:
                break
            int(b["tokens"][0, 0])
            got += 1
        return got * nbytes_each / (time.perf_counter() - t0) / 1e9


def steps_alone(torch: ModuleType, device: int, n: int, step: Step) -> float:
    """n training steps with no loader: the sum of a resident batch-sized
    tensor and the step's GPU work, queued without a sync, as measure() does."""
    dev = torch.device("cuda", device)
    x = torch.ones(results["batch"], dtype=torch.int32, device=dev)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        x.sum()
        step()
    torch.cuda.synchronize(dev)
    return time.perf_counter() - t0


def gpu_step(torch: ModuleType, device: int, ms: float) -> Step:
    """A callable that queues about ms of GPU work (torch.cuda._sleep, calibrated)."""
    if ms <= 0:
        return lambda: None
    dev = torch.device("cuda", device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1_000_000
    torch.cuda._sleep(cycles)  # warm
    torch.cuda.synchronize(dev)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    per_ms = cycles / max(start.elapsed_time(end), 1e-3)
    n = int(per_ms * ms)
    return lambda: torch.cuda._sleep(n)
