"""scripts/gpu_check.py, GPU memory: what the daemon holds, idle, with cuda
sessions open and after they closed, and after a trainer was killed; and the
daemon's own device-copy figures from its metrics."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from types import ModuleType
from typing import Any, Dict, Optional

from dataloaderd import Loader, _cuda
from gpu_check_report import check, results

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src")


def process_gpu_mib(pid: int) -> Optional[int]:
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


def gpu_used_mib(device: int) -> int:
    """GPU memory in use on the device, every process counted (driver's view)."""
    free, total = _cuda.device_memory(device)
    return (total - free) >> 20


def wait_gpu_mib(pid: int, want: int, seconds: float) -> Optional[int]:
    """Polls until pid holds want MiB (or seconds pass); returns the last reading."""
    end = time.monotonic() + seconds
    while True:
        mib = process_gpu_mib(pid)
        if mib is None or mib == want or time.monotonic() > end:
            return mib
        time.sleep(0.2)


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


def free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port: int = sk.getsockname()[1]
        return port


def device_copies(metrics_addr: str) -> Optional[Dict[str, Any]]:
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

    def under(q: float) -> Optional[float]:  # None: above the largest finite bucket
        le = next((le for le, n in buckets if n >= q * count), None)
        return None if le in (None, float("inf")) else le * 1e6

    return {"copies": count, "mean_us": round(total / count * 1e6, 1), "p50_under_us": under(0.5),
            "p99_under_us": under(0.99)}


def daemon_memory(torch: ModuleType, config: Dict[str, Any], sock: str, device: int, pid: int) -> None:
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
        session = ld._session  # the daemon's reply: the ring's geometry
        assert session is not None
        ring = session.ring
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


def killed_client(config: Dict[str, Any], sock: str, device: int, pid: int) -> None:
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, CLIENT, json.dumps(config), sock, str(device)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
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
