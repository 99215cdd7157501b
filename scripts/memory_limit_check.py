"""Checks, for real, that the daemon's memory budgets hold within a memory
cgroup (issue 23): run as root on a machine that lets root make a cgroup
(v2, or v1's memory hierarchy), with the client's venv:

    sudo .venv/bin/python scripts/memory_limit_check.py [--bin bin/dataloaderd] [--limit-mb 1024]

It makes a cgroup limited to --limit-mb and runs the daemon in it (the
clients run outside it), then:

1. with the default budgets: opens sessions of 256 MiB rings (inline and shm
   in turn), each read by a consumer, until one is refused, and streams from
   them all a while; the daemon must be alive at the end and every refusal
   must name --ring-budget-mb;
2. with --ring-budget-mb past the limit: the daemon must refuse to start,
   naming the flag and the limit;
3. a resume from a rank file of 175 MiB (15 million cursors) must be refused
   by name, before it is read, and the daemon live.

It prints what it saw and exits 1 if either did not hold. Not part of
`make test` (it needs root and a cgroup file system it may write).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients", "python", "tests"))
from corpus import write_megatron  # noqa: E402
from dataloaderd import Loader, ResourceExhaustedError, Transport  # noqa: E402


class Cgroup:
    """A memory cgroup of its own, v2 or v1, removed on close."""

    def __init__(self, limit: int) -> None:
        name = f"dataloaderd-memcheck-{os.getpid()}"
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers") and "memory" in open("/sys/fs/cgroup/cgroup.controllers").read():
            self.dir, self.limit_file, self.peak_file = f"/sys/fs/cgroup/{name}", "memory.max", "memory.peak"
            with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
                f.write("+memory")
        elif os.path.isdir("/sys/fs/cgroup/memory"):
            self.dir, self.limit_file, self.peak_file = f"/sys/fs/cgroup/memory/{name}", "memory.limit_in_bytes", "memory.max_usage_in_bytes"
        else:
            raise SystemExit("no writable memory cgroup: neither v2 with the memory controller nor v1's memory hierarchy")
        os.mkdir(self.dir)
        with open(os.path.join(self.dir, self.limit_file), "w") as f:
            f.write(str(limit))

    def peak(self) -> int:
        try:
            with open(os.path.join(self.dir, self.peak_file)) as f:
                return int(f.read())
        except OSError:
            return -1

    def start(self, args: List[str], log: str) -> subprocess.Popen[bytes]:
        """Starts a process inside the cgroup."""
        procs = os.path.join(self.dir, "cgroup.procs")
        return subprocess.Popen(["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *args],
                                stdout=open(log, "w"), stderr=subprocess.STDOUT)

    def close(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def wait_healthy(binary: str, sock: str, proc: subprocess.Popen[bytes]) -> bool:
    for _ in range(100):
        if proc.poll() is not None:
            return False
        if subprocess.run([binary, "healthcheck", "--socket", sock, "--timeout", "1s"], capture_output=True).returncode == 0:
            return True
        time.sleep(0.1)
    return False


def budgets_hold(binary: str, cg: Cgroup, work: str, seconds: float) -> Tuple[bool, str]:
    rng = np.random.default_rng(1)
    docs = [rng.integers(1, 50000, size=int(rng.integers(1000, 60000))).astype(np.int32) for _ in range(600)]
    prefix = write_megatron(os.path.join(work, "web"), docs)
    sock, log = os.path.join(work, "d.sock"), os.path.join(work, "daemon.log")
    daemon = cg.start([binary, "serve", "--socket", sock, "--log-level", "info", "--shm-dir", "/dev/shm"], log)
    if not wait_healthy(binary, sock, daemon):
        return False, "the daemon did not start: " + open(log).read()[-2000:]
    # 8 slots of 64 lines of 131,072 tokens: 32 MiB a slot, 256 MiB a ring.
    cfg = {"seq_len": 131071, "batch_size": 64, "seed": 5, "logical_shards": 16, "eos_id": 0, "epochs": 0,
           "datasets": [{"name": "web", "path": prefix, "format": "megatron", "weight": 1}]}
    stop = threading.Event()
    batches = [0]
    refusals: List[str] = []
    loaders: List[Loader] = []
    errors: List[str] = []

    def read(loader: Loader) -> None:
        try:
            for _ in loader:
                batches[0] += 1
                if stop.is_set():
                    break
        except Exception as e:  # a daemon killed ends every stream
            errors.append(repr(e))

    threads = []
    for i in range(8):
        transport: Transport = "inline" if i % 2 == 0 else "shm"
        loader = Loader(cfg, socket=sock, dp_rank=i, dp_size=16, transport=transport, slots=8, job="memcheck")
        try:
            it = iter(loader)
            next(it)
        except ResourceExhaustedError as e:
            refusals.append(str(e))
            loader.close()
            break
        except Exception as e:  # the daemon killed while it made the ring
            errors.append(repr(e))
            break
        loaders.append(loader)
        t = threading.Thread(target=read, args=(loader,), daemon=True)
        t.start()
        threads.append(t)
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    alive = daemon.poll() is None
    for loader in loaders:
        try:
            loader.close()
        except Exception:
            pass
    daemon.terminate()
    daemon.wait(timeout=30)
    budget_line = next((line for line in open(log) if '"memory budgets"' in line), "")
    ok = alive and not errors and bool(refusals) and all("--ring-budget-mb" in r for r in refusals)
    return ok, (f"sessions of 256 MiB opened: {len(loaders)}, refused: {len(refusals)} ({refusals[:1]}); batches read: {batches[0]}; "
                f"daemon alive: {alive}, exit {daemon.returncode}; stream errors: {errors[:2]}; cgroup peak {cg.peak() >> 20} MiB; "
                f"log: {budget_line.strip()}")


def big_state_refused(binary: str, cg: Cgroup, work: str) -> Tuple[bool, str]:
    """Resumes from a rank file of 175 MiB (under the 256 MiB cap on any file
    read whole) whose columns hold 15 million cursors: refused by name, and
    the daemon lives."""
    rng = np.random.default_rng(2)
    docs = [rng.integers(1, 50000, size=int(rng.integers(10, 200))).astype(np.int32) for _ in range(2000)]
    prefix = write_megatron(os.path.join(work, "small"), docs)
    sock, log = os.path.join(work, "d3.sock"), os.path.join(work, "daemon3.log")
    daemon = cg.start([binary, "serve", "--socket", sock, "--log-level", "info"], log)
    if not wait_healthy(binary, sock, daemon):
        return False, "the daemon did not start: " + open(log).read()[-2000:]
    cfg = {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 8, "eos_id": 0,
           "datasets": [{"name": "web", "path": prefix, "format": "megatron", "weight": 1}]}
    folder = os.path.join(work, "ckpt")
    with Loader(cfg, socket=sock, dp_rank=0, dp_size=1, job="save") as loader:
        it = iter(loader)
        for _ in range(3):
            next(it)
        path = loader.save(folder)
    saved = json.load(open(path))
    n = 15_000_000
    zeros = "[" + ",".join(["0"] * n) + "]"
    with open(path, "w") as f:
        head = {k: v for k, v in saved.items() if k != "shards"}
        f.write(json.dumps(head)[:-1] + ', "shards": [')
        f.write(", ".join(json.dumps(r) for r in saved["shards"]))
        f.write(', {"dataset": 0, "first": 100, ')
        f.write(", ".join(f'"{c}": {zeros}' for c in ("lines", "epoch", "pos", "offset", "taken", "base")))
        f.write("}]}")
    size = os.path.getsize(path)
    said = ""
    try:
        with Loader(cfg, socket=sock, dp_rank=0, dp_size=1, job="resume", resume_from=folder) as loader:
            next(iter(loader))
        said = "resumed"
    except Exception as e:
        said = repr(e)
    alive = daemon.poll() is None
    daemon.terminate()
    daemon.wait(timeout=30)
    ok = alive and os.path.basename(path) in said and "it was not read" in said
    return ok, f"a rank file of {size >> 20} MiB: {said[:300]}; daemon alive: {alive}; cgroup peak {cg.peak() >> 20} MiB"


def flags_refused(binary: str, cg: Cgroup, work: str, limit: int) -> Tuple[bool, str]:
    sock, log = os.path.join(work, "d2.sock"), os.path.join(work, "daemon2.log")
    mb = str(2 * limit >> 20)
    daemon = cg.start([binary, "serve", "--socket", sock, "--ring-budget-mb", mb], log)
    code: Optional[int] = None
    try:
        code = daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.terminate()
        daemon.wait()
    out = open(log).read().strip()
    ok = code == 1 and f"--ring-budget-mb {mb} MiB" in out and "memory limit" in out
    return ok, f"--ring-budget-mb {mb}: exit {code}: {out[-400:]}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "bin", "dataloaderd"))
    p.add_argument("--limit-mb", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=20)
    args = p.parse_args()
    limit = args.limit_mb << 20
    cg = Cgroup(limit)
    try:
        with tempfile.TemporaryDirectory() as work:
            held, said = budgets_hold(args.bin, cg, work, args.seconds)
            print(("PASS" if held else "FAIL"), "budgets hold:", said)
            refused, said2 = flags_refused(args.bin, cg, work, limit)
            print(("PASS" if refused else "FAIL"), "flags past the limit refused:", said2)
            bounded, said3 = big_state_refused(args.bin, cg, work)
            print(("PASS" if bounded else "FAIL"), "a large rank file refused:", said3)
    finally:
        cg.close()
    return 0 if held and refused and bounded else 1


if __name__ == "__main__":
    sys.exit(main())
