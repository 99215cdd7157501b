#!/usr/bin/env python3
"""GPU delivery check, for a machine with a GPU, PyTorch and bin/dataloaderd.

    python scripts/gpu_check.py --daemon bin/dataloaderd [--device 0] [--batches 200]
        [--batch-size 8] [--seq-len 4096] [--step-ms 2] [--json results.json]

Run through scripts/gpu-check.sh, which checks the machine first. Each stage
runs even when an earlier one failed, and the summary comes last:

1. ipc-selftest: a child process allocates device memory with the driver,
   fills it and exports it by CUDA IPC; this process opens it with
   dataloaderd._cuda.IpcRing and compares bytes (the client half of the
   cuda transport, without the daemon).
2. shm reference: the batches read over shm, copied: the bits to match.
3. bit-identity: shm + .to(device), shm-pinned, cuda (control block and
   messages, views and clones) each deliver exactly the reference batches,
   as int32 tensors on the device; so does a cuda session shared by a group
   of two consumers, on GPUs 0 and 1 (both on 0 when there is one GPU).
4. torch host-to-device copies of the same bytes in the same run (pageable
   and pinned, per batch and as one copy), and shm with no device copy (the
   daemon's own rate on this machine).
5. measure, one session per path: open to first batch on the device; after
   20 warm batches, the GB/s at which the path lands batches on the GPU with
   one kernel reading each; then the time next() (and for shm + .to(), its
   copy) takes per batch under a training step of --step-ms of GPU work that
   the trainer synchronizes on; then the same steps with the trainer running
   ahead (no sync), timed against those steps with no loader just before
   and after.
6. GPU memory: the daemon's, idle, with one and two cuda sessions open and
   after they closed; a trainer killed with SIGKILL mid-run; at the end the
   daemon holds none.

Exit status: 0 all checks passed, 1 a check failed, 2 no GPU or no torch.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import urllib.request
import warnings

warnings.filterwarnings("ignore", message=".*not writable.*")  # torch views of the read-only shm ring

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "clients", "python", "src")
sys.path.insert(0, CLIENT)
sys.path.insert(0, HERE)
from bench import write_corpus  # noqa: E402
from daemon import running  # noqa: E402
from dataloaderd import Loader  # noqa: E402
from dataloaderd import _cuda  # noqa: E402

failures = []
results = {"rates_gbps": {}, "waits_us": {}, "gpu_mib": {}}


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def stage(name, fn, *args):
    """Runs one stage; an exception fails it and the next stage still runs."""
    print(f"== {name}", flush=True)
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - report and go on
        traceback.print_exc()
        failures.append(f"{name}: {type(e).__name__}: {e}")
        return None


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


def gpu_used_mib(device):
    """GPU memory in use on the device, every process counted (driver's view)."""
    free, total = _cuda.device_memory(device)
    return (total - free) >> 20


def wait_gpu_mib(pid, want, seconds):
    """Polls until pid holds want MiB (or seconds pass); returns the last reading."""
    end = time.monotonic() + seconds
    while True:
        mib = process_gpu_mib(pid)
        if mib is None or mib == want or time.monotonic() > end:
            return mib
        time.sleep(0.2)


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

# A trainer that dies: opens a cuda session, takes batches, says so, sleeps
# until it is killed.
_KILLED_CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from dataloaderd import Loader
    cfg, sock, dev = json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    ld = Loader(cfg, dp_rank=0, dp_size=1, socket=sock, transport="cuda", job="gpucheck-killed", device=dev)
    it = iter(ld)
    for _ in range(5):
        b = next(it)
        b["tokens"].sum().item()
    print("ready", flush=True)
    time.sleep(600)
""")


def ipc_selftest(torch, device):
    n, stride = 3 * 4096, 4096
    child = subprocess.Popen([sys.executable, "-c", _IPC_CHILD, CLIENT, str(device), str(n)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        handle = bytes.fromhex(child.stdout.readline().strip())
        ring = _cuda.IpcRing(handle, slots=3, stride=stride, line_tokens=8, device=device)
        want = torch.tensor([(i * 7 + 3) & 0xFF for i in range(n)], dtype=torch.uint8)
        got = torch.cat([ring.slot_bytes(i, stride).cpu() for i in range(3)])
        check(torch.equal(got, want), "IpcRing slot views hold the exporter's bytes")
        b = ring.batch(1, 2)
        check(b.shape == (2, 8) and b.is_cuda and b.dtype == torch.int32, "batch() is an int32 device view")
        del b
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
                break
    check(len(out) == batches, f"{len(out)} reference batches")
    return out


class Path:
    """One way of getting batches onto the GPU, as a trainer would use it:
    batches() opens a loader and yields int32 device tensors."""

    def __init__(self, name, torch, config, sock, device, transport, fast=True, copy=False, to_device=False):
        self.name, self.torch, self.config, self.sock, self.device = name, torch, config, sock, device
        self.dev = torch.device("cuda", device)
        self.transport, self.fast, self.copy, self.to_device = transport, fast, copy, to_device
        self.tag = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")

    def batches(self, job):
        """(tokens on the device, step) per batch; the time until a tensor is
        in hand is the caller's to take around next()."""
        with Loader(self.config, dp_rank=0, dp_size=1, socket=self.sock, transport=self.transport, job=job,
                    device=self.device, fast=self.fast, copy=self.copy) as ld:
            for b in ld:
                tok = b["tokens"]
                if self.to_device:  # shm, then a plain pageable copy: what a trainer does without us
                    tok = self.torch.from_numpy(tok).to(self.dev)
                yield tok


def paths(torch, config, sock, device):
    a = (torch, config, sock, device)
    return [Path("shm + .to(device)", *a, "shm", to_device=True),
            Path("shm-pinned", *a, "shm-pinned"),
            Path("cuda, control block", *a, "cuda"),
            Path("cuda, messages", *a, "cuda", fast=False)]


def bit_identity(path, ref):
    torch = path.torch
    same, count = True, 0
    for i, tok in enumerate(path.batches(f"same-{path.tag}")):
        count += 1
        same = same and tok.is_cuda and tok.dtype == torch.int32 and torch.equal(tok.cpu(), torch.from_numpy(ref[i]))
        if count == len(ref):
            break
    check(same and count == len(ref), f"{path.name}: {count} batches on the device, bit-identical to shm")


def group(torch, config, sock, ref):
    """The two ranks of a tensor-parallel group share one cuda session, on
    GPUs 0 and 1 (both on 0 with one GPU): each reads exactly the reference
    batches, on its own GPU."""
    devices = (0, 1 if torch.cuda.device_count() > 1 else 0)
    kw = dict(dp_rank=0, dp_size=1, socket=sock, job="gpucheck-group", transport="cuda", consumers=2)
    same, got = True, [0, 0]
    with Loader(config, device=devices[0], **kw) as a, Loader(config, device=devices[1], **kw) as b:
        its = [iter(a), iter(b)]
        for i in range(len(ref)):
            for r in (0, 1):
                tok = next(its[r])["tokens"]
                same = same and tok.device.index == devices[r] and torch.equal(tok.cpu(), torch.from_numpy(ref[i]))
                got[r] += 1
    check(same and got == [len(ref)] * 2,
          f"a group of 2 consumers on GPUs {devices}: {got} batches, each on its GPU, bit-identical to shm")


def measure(path, n, step, alone, nbytes_each, warm=20):
    """One session of a path: the time to its first batch on the device; then,
    after warm batches, the rate at which it lands batches on the GPU with one
    kernel reading each; then the time each next() (and for shm + .to(), its
    copy) takes under a training step of GPU work the trainer synchronizes on
    (loss.item() each step)."""
    torch, dev = path.torch, path.dev
    out = {}
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


def torch_baseline(torch, device, ref, repeats=3):
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


def host_rate(config, sock, n, nbytes_each):
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


def steps_alone(torch, device, n, step):
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


def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def device_copies(metrics_addr):
    """The daemon's dataloaderd_device_copy_seconds: count, mean and the
    bucket bounds under which half and 99% of the copies fell."""
    text = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10).read().decode()
    buckets, count, total = [], 0, 0.0
    for line in text.splitlines():
        if line.startswith("dataloaderd_device_copy_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
        elif line.startswith("dataloaderd_device_copy_seconds_count"):
            count = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("dataloaderd_device_copy_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
    if not count:
        return None

    def under(q):  # None: above the largest finite bucket
        le = next((le for le, n in buckets if n >= q * count), None)
        return None if le in (None, float("inf")) else le * 1e6

    return {"copies": count, "mean_us": round(total / count * 1e6, 1), "p50_under_us": under(0.5),
            "p99_under_us": under(0.99)}


def gpu_step(torch, device, ms):
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


def daemon_memory(torch, config, sock, device, pid):
    """The daemon's GPU memory: idle, with one cuda session open, after it closed."""
    mib = results["gpu_mib"]
    torch.cuda.synchronize()
    mib["daemon idle"] = process_gpu_mib(pid)
    mib["GPU used, daemon idle"] = gpu_used_mib(device)
    with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="cuda", job="gpucheck-mem", device=device) as ld:
        it = iter(ld)
        next(it)["tokens"].sum().item()
        mib["daemon, one cuda session"] = process_gpu_mib(pid)
        mib["GPU used, one cuda session"] = gpu_used_mib(device)
        ring = ld._session.ring
        mib["ring (slots x stride)"] = round(ring.slots * ring.slot_stride / 2**20, 2)
        with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="cuda", job="gpucheck-mem2",
                    device=device) as ld2:
            next(iter(ld2))["tokens"].sum().item()
            mib["daemon, two cuda sessions"] = process_gpu_mib(pid)
            mib["GPU used, two cuda sessions"] = gpu_used_mib(device)
    mib["daemon, sessions closed"] = wait_gpu_mib(pid, 0, 10)
    mib["GPU used, sessions closed"] = gpu_used_mib(device)
    if mib["daemon idle"] is None:
        print("  SKIP per-process GPU memory: nvidia-smi cannot read it here")
        return
    check(mib["daemon, one cuda session"] > 0, "nvidia-smi lists the daemon while it holds a ring")
    check(mib["daemon, sessions closed"] == 0, "the daemon frees its GPU memory (and context) when sessions close")


def killed_client(config, sock, device, pid):
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, CLIENT, json.dumps(config), sock, str(device)],
                             stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().strip()
        check(line == "ready", "a trainer process takes cuda batches, then is killed")
        held = process_gpu_mib(pid)
        used = gpu_used_mib(device)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        t0 = time.monotonic()
        after = wait_gpu_mib(pid, 0, 30)
        results["gpu_mib"]["daemon, trainer alive"] = held
        results["gpu_mib"]["daemon, after the trainer's SIGKILL"] = after
        results["gpu_mib"]["GPU used, trainer alive"] = used
        results["gpu_mib"]["GPU used, after its SIGKILL"] = gpu_used_mib(device)
        if not held:
            print("  SKIP: nvidia-smi does not list the daemon's GPU memory here")
        else:
            check(after == 0,
                  f"after SIGKILL of the trainer the daemon frees its GPU memory ({held} -> {after} MiB "
                  f"in {time.monotonic() - t0:.1f} s)")
    finally:
        if child.poll() is None:
            child.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", default="bin/dataloaderd")
    ap.add_argument("--device", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    ap.add_argument("--batches", type=int, default=500, help="batches per pass")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--step-ms", type=float, default=2.0, help="GPU work per training step in the wait pass")
    ap.add_argument("--corpus-mb", type=int, default=256)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    torch = need_gpu()
    torch.cuda.set_device(args.device)
    name = torch.cuda.get_device_name(args.device)
    print(f"GPU {args.device}: {name}, torch {torch.__version__}, "
          f"batches of {args.batch_size}x{args.seq_len + 1} int32", flush=True)
    results.update(gpu=name, torch=torch.__version__, batch=[args.batch_size, args.seq_len + 1],
                   batches=args.batches, step_ms=args.step_ms)
    nbytes = args.batch_size * (args.seq_len + 1) * 4

    stage("ipc-selftest: open a CUDA IPC handle another process exported", ipc_selftest, torch, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "corpus")
        write_corpus(prefix, args.corpus_mb << 19, 0)
        sock = os.path.join(tmp, "d.sock")
        config = {"seq_len": args.seq_len, "batch_size": args.batch_size, "seed": 1, "logical_shards": 64,
                  "eos_id": 0, "datasets": [{"name": "web", "path": prefix, "format": "megatron"}]}
        metrics_addr = f"127.0.0.1:{free_port()}"
        with running(args.daemon, sock, "--log-level", "warn", "--metrics-addr", metrics_addr) as proc:
            ref = stage("shm reference", shm_reference, config, sock, args.batches) or []

            if ref:
                for p in paths(torch, config, sock, args.device) + [
                        Path("cuda, clones", torch, config, sock, args.device, "cuda", copy=True)]:
                    stage(f"bit-identity: {p.name}", bit_identity, p, ref)
                stage("bit-identity: a cuda group of two consumers", group, torch, config, sock, ref)
                rates = stage("torch host-to-device, same bytes", torch_baseline, torch, args.device, ref) or {}
                results["rates_gbps"].update(rates)
            results["rates_gbps"]["shm, no device copy (daemon rate)"] = stage(
                "shm without a device copy", host_rate, config, sock, args.batches, nbytes)
            step = gpu_step(torch, args.device, args.step_ms)
            def alone():
                return steps_alone(torch, args.device, args.batches, step)

            results["steps_alone_s"] = alone()  # also warms the GPU's clock
            for p in paths(torch, config, sock, args.device):
                m = stage(f"measure: {p.name}", measure, p, args.batches, step, alone, nbytes)
                if m:
                    results["rates_gbps"][p.name] = m["gbps"]
                    results["waits_us"][p.name] = m["wait_us"]
                    results.setdefault("first_batch_ms", {})[p.name] = m["first_batch_ms"]
                    results.setdefault("steps_ratio", {})[p.name] = round(m["steps_ratio"], 3)
            stage("daemon GPU memory", daemon_memory, torch, config, sock, args.device, proc.pid)
            stage("a trainer killed mid-run", killed_client, config, sock, args.device, proc.pid)
            results["device_copies"] = stage("the daemon's device copies (metrics)", device_copies, metrics_addr)
            final = wait_gpu_mib(proc.pid, 0, 10)
            results["gpu_mib"]["daemon at the end"] = final
            if final is not None:
                check(final == 0, "the daemon holds no GPU memory once every client is gone")
    free, total = _cuda.device_memory(args.device)
    results["gpu_mib"]["GPU free at the end"] = free >> 20
    results["gpu_mib"]["GPU total"] = total >> 20

    print(f"\nGPU {args.device}: {name}; torch {torch.__version__}; {args.batches} batches of "
          f"{args.batch_size}x{args.seq_len + 1} int32 ({nbytes / 2**20:.2f} MiB) per pass")
    print("into the device, GB/s (same bytes, same run):")
    for k, v in results["rates_gbps"].items():
        print(f"  {k:<40}{'-' if v is None else f'{v:8.2f}'}")
    print("open to first batch on the device (ms):")
    for k, v in results.get("first_batch_ms", {}).items():
        print(f"  {k:<40}{v:8.1f}")
    print(f"trainer wait per batch under a {args.step_ms} ms GPU step (us):")
    for k, v in results["waits_us"].items():
        print(f"  {k:<40}p50 {v['p50']:>8.1f}  p99 {v['p99']:>8.1f}  max {v['max']:>8.1f}")
    print(f"{args.batches} steps of {args.step_ms} ms, trainer running ahead: time with the loader / "
          f"the same steps alone (about {results.get('steps_alone_s', 0) * 1e3:.0f} ms); 1.00: the GPU never waits:")
    for k, v in results.get("steps_ratio", {}).items():
        print(f"  {k:<40}{v:8.3f}")
    c = results.get("device_copies")
    if c:
        print(f"the daemon's copies into device slots (dataloaderd_device_copy_seconds, every cuda batch of the run): "
              f"{c['copies']}, mean {c['mean_us']} us, half under {c['p50_under_us']} us, "
              f"99% under {c['p99_under_us']} us (None: above the largest bucket)")
    print("GPU memory (MiB, nvidia-smi per process):")
    for k, v in results["gpu_mib"].items():
        print(f"  {k:<40}{v}")
    results["failures"] = failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if failures:
        print(f"gpu-check: {len(failures)} check(s) failed: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("gpu-check: all checks passed")


if __name__ == "__main__":
    main()
