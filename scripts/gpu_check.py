#!/usr/bin/env python3
"""GPU delivery check, for a machine with a GPU, PyTorch and bin/dataloaderd.

    python scripts/gpu_check.py --daemon bin/dataloaderd [--device 0] [--batches 200]

Run through scripts/gpu-check.sh, which checks the machine first. Stages:

1. ipc-selftest: a child process allocates device memory with the driver,
   fills it and exports it by CUDA IPC; this process opens it with
   dataloaderd._cuda.IpcRing and compares bytes (the client half of the
   cuda transport, without the daemon).
2. shm reference: batches read over shm and copied, the bits to match.
3. torch baseline: the same bytes copied host-to-device by plain torch, from
   pageable and from pinned memory, GB/s measured in this run.
4. shm-pinned: the shm ring registered with the driver (PinnedShm), one
   non-blocking copy per batch; bit-identical to the reference; GB/s and
   trainer wait per batch.
5. cuda: the daemon's device ring through the Loader (transport="cuda"),
   announced in the control block and, for comparison, by messages
   (fast=False): batches as device tensors, bit-identical to the reference;
   GB/s and trainer wait per batch.
6. daemon GPU memory (nvidia-smi per process) with sessions open, and no
   leak after every client closed.

Exit status: 0 all checks passed, 1 a check failed, 2 no GPU or no torch.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "src"))
sys.path.insert(0, HERE)
from bench import write_corpus  # noqa: E402
from daemon import running  # noqa: E402
from dataloaderd import Loader  # noqa: E402
from dataloaderd import _cuda  # noqa: E402

SEQ_LEN, BATCH = 4096, 8
failures = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def need_gpu():
    try:
        torch = _cuda._torch()
    except _cuda.CudaUnavailableError as e:
        print(f"gpu-check: {e}", file=sys.stderr)
        sys.exit(2)
    return torch


def process_gpu_mib(pid):
    """GPU memory nvidia-smi attributes to pid, in MiB (0 when it holds none)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    total = 0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            total += int(parts[1])
    return total


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


def ipc_selftest(torch, device):
    print("ipc-selftest: open a CUDA IPC handle exported by another process")
    n, stride = 3 * 4096, 4096
    child = subprocess.Popen([sys.executable, "-c", _IPC_CHILD, os.path.join(HERE, "..", "clients", "python", "src"),
                              str(device), str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        handle = bytes.fromhex(child.stdout.readline().strip())
        ring = _cuda.IpcRing(handle, slots=3, stride=stride, line_tokens=8, device=device)
        want = torch.tensor([(i * 7 + 3) & 0xFF for i in range(n)], dtype=torch.uint8)
        got = torch.cat([ring.slot_bytes(i, stride).cpu() for i in range(3)])
        check(torch.equal(got, want), "IpcRing slot views hold the exporter's bytes")
        check(ring.batch(1, 2).shape == (2, 8) and ring.batch(1, 2).is_cuda, "batch() is an int32 device view")
        ring.close()
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=60)


def shm_reference(config, sock, batches):
    with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="shm", copy=True, job="gpucheck-ref") as ld:
        out = []
        for b in ld:
            out.append(b["tokens"])
            if len(out) == batches:
                return out
    return out


def torch_baseline(torch, device, ref):
    dev = torch.device("cuda", device)
    host = [torch.from_numpy(t) for t in ref]
    pinned = [t.pin_memory() for t in host]
    rates = {}
    for name, src, nb in (("torch pageable .to()", host, False), ("torch pinned non_blocking", pinned, True)):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for t in src:
            t.to(dev, non_blocking=nb)
        torch.cuda.synchronize(dev)
        rates[name] = sum(t.numel() * 4 for t in src) / (time.perf_counter() - t0) / 1e9
    return rates


def shm_pinned(torch, config, sock, device, ref):
    dev = torch.device("cuda", device)
    waits, nbytes, copy_s, same = [], 0, 0.0, True
    with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="shm", job="gpucheck-pinned") as ld:
        it = iter(ld)
        first = True
        pinned = None
        for i in range(len(ref)):
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            if first:
                # The loader's ring is private API; the wired loader will own this.
                pinned = _cuda.PinnedShm(ld._ring, device)
                first = False
            t1 = time.perf_counter()
            # The shm-pinned comparison path is not a Loader transport: the
            # slot follows from the step as the daemon assigns it.
            slot = (b["step"] - 1) % ld._session.ring.slots
            out, done = pinned.fetch(slot, b["lines"])
            done.synchronize()
            copy_s += time.perf_counter() - t1
            nbytes += out.numel() * 4
            same = same and torch.equal(out.cpu(), torch.from_numpy(ref[i]))
        if pinned is not None:
            pinned.close()
    check(same, "shm-pinned batches are bit-identical to shm")
    return nbytes / copy_s / 1e9 if copy_s else 0.0, waits


def cuda_transport(torch, config, sock, device, ref, fast):
    """The Loader's cuda transport: batch["tokens"] is an int32 CUDA tensor on
    the device, a view of the daemon's device ring; slots go back through a
    ReleaseFence once the GPU work queued on them is done. fast: batches are
    announced in the control block (else one gRPC message per batch)."""
    ld = Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="cuda", job=f"gpucheck-cuda-{fast}",
                device=device, fast=fast)
    waits, nbytes, same = [], 0, True
    with ld:
        it = iter(ld)
        t_all = time.perf_counter()
        for i in range(len(ref)):
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            tok = b["tokens"]
            nbytes += tok.numel() * 4
            same = same and tok.is_cuda and torch.equal(tok.cpu(), torch.from_numpy(ref[i]))
        rate = nbytes / (time.perf_counter() - t_all) / 1e9
    check(same, f"cuda batches ({'control block' if fast else 'messages'}) are bit-identical to shm")
    return rate, waits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", default="bin/dataloaderd")
    ap.add_argument("--device", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--corpus-mb", type=int, default=128)
    args = ap.parse_args()
    torch = need_gpu()
    torch.cuda.set_device(args.device)
    print(f"GPU {args.device}: {torch.cuda.get_device_name(args.device)}, torch {torch.__version__}")

    ipc_selftest(torch, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "corpus")
        write_corpus(prefix, args.corpus_mb << 19, 0)
        sock = os.path.join(tmp, "d.sock")
        config = {"seq_len": SEQ_LEN, "batch_size": BATCH, "seed": 1, "logical_shards": 64, "eos_id": 0,
                  "datasets": [{"name": "web", "path": prefix, "format": "megatron"}]}
        with running(args.daemon, sock, "--log-level", "warn") as proc:
            base_mib = process_gpu_mib(proc.pid)
            print(f"shm reference: {args.batches} batches of {BATCH}x{SEQ_LEN + 1} int32")
            ref = shm_reference(config, sock, args.batches)
            check(len(ref) == args.batches, f"{len(ref)} reference batches")
            print("host-to-device rates (same bytes, same run)")
            rates = torch_baseline(torch, args.device, ref)
            print("shm-pinned")
            rates["shm-pinned (PinnedShm)"], pinned_waits = shm_pinned(torch, config, sock, args.device, ref)
            print("cuda")
            cuda_rate, cuda_waits = cuda_transport(torch, config, sock, args.device, ref, True)
            rates["cuda (daemon device ring)"] = cuda_rate
            rates["cuda, messages (fast=False)"], msg_waits = cuda_transport(torch, config, sock, args.device, ref, False)
            open_mib = process_gpu_mib(proc.pid)
            time.sleep(1.0)  # sessions are closed; give the daemon a moment
            after_mib = process_gpu_mib(proc.pid)

        for name, r in rates.items():
            print(f"  {name:<30}{r:>8.2f} GB/s")
        for name, w in (("shm-pinned", pinned_waits), ("cuda", cuda_waits), ("cuda, messages", msg_waits)):
            if w:
                w = sorted(w)
                print(f"  trainer wait per batch, {name}: median {w[len(w) // 2] * 1e6:.0f} us, "
                      f"p99 {w[int(len(w) * 0.99) - 1] * 1e6:.0f} us")
        if None in (base_mib, open_mib, after_mib):
            print("  SKIP daemon GPU memory: nvidia-smi unavailable")
        else:
            print(f"  daemon GPU memory: {base_mib} MiB idle, {open_mib} MiB after the sessions, {after_mib} MiB once closed")
            check(after_mib == 0, "the daemon holds no GPU memory once every client closed")
    free, total = _cuda.device_memory(args.device)
    print(f"GPU {args.device} memory now: {free >> 20} MiB free of {total >> 20} MiB")
    if failures:
        print(f"gpu-check: {len(failures)} check(s) failed: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("gpu-check: all checks passed")


if __name__ == "__main__":
    main()
