#!/usr/bin/env python3
"""The cuda transport's CPU-side cost per batch, on a machine without a GPU.

    python scripts/cuda_standin_wait.py [--batches 2000] [--step-us 300]

Runs bin/dataloaderd and this client against the stand-in driver
(internal/cuda/testdata/fakecuda.c, built here with cc) and the stand-in torch
of clients/python/tests/standin_torch.py, and prints the time next() takes
(p50, p99) while the daemon is ahead, for shm and for cuda with the control
block (fast=True) and by messages (fast=False). The stand-in's copies are
plain memcpy, so this measures the transport's protocol cost, not a GPU's;
scripts/gpu-check.sh measures the real thing.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(REPO, "clients", "python", "tests"))
sys.path.insert(0, os.path.join(REPO, "clients", "python", "src"))

from rundaemon import Daemon  # noqa: E402
from corpus import make_corpus  # noqa: E402
import standin_torch  # noqa: E402
from dataloaderd import Loader, Transport, _cuda  # noqa: E402


def waits(config: Dict[str, Any], sock: str, transport: Transport, fast: bool, batches: int,
          step_s: float) -> Tuple[float, float]:
    with Loader(config, dp_rank=0, dp_size=1, socket=sock, job=f"w-{transport}-{fast}-{time.time_ns()}",
                transport=transport, fast=fast, slots=8) as ld:
        it = iter(ld)
        next(it)
        time.sleep(0.2)  # let the daemon fill the ring
        out = []
        for _ in range(batches):
            t0 = time.perf_counter_ns()
            next(it)
            out.append(time.perf_counter_ns() - t0)
            busy = time.perf_counter() + step_s  # a training step, on the CPU
            while time.perf_counter() < busy:
                pass
    out.sort()
    return out[len(out) // 2] / 1e3, out[int(len(out) * 0.99)] / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--step-us", type=float, default=300)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "libcuda.so.1")
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib,
                        os.path.join(REPO, "internal", "cuda", "testdata", "fakecuda.c")], check=True)
        os.environ["DATALOADERD_CUDA_LIBRARY"] = lib
        _cuda._torch = standin_torch.fake_torch
        datasets, _ = make_corpus(tmp)
        config = {"seq_len": 2047, "batch_size": 8, "seed": 5, "logical_shards": 8, "eos_id": 0,
                  "datasets": datasets}
        d = Daemon(Path(tmp), ["--cuda-library", lib])
        try:
            print(f"next() with the daemon ahead, {args.batches} batches of 8x2048 int32, "
                  f"{args.step_us:.0f} us busy step")
            for _ in range(args.repeats):
                paths: Tuple[Tuple[Transport, bool], ...] = (("shm", True), ("cuda", True), ("cuda", False))
                for transport, fast in paths:
                    p50, p99 = waits(config, d.socket, transport, fast, args.batches, args.step_us / 1e6)
                    print(f"  {transport:<5} fast={fast!s:<6} p50 {p50:7.1f} us   p99 {p99:7.1f} us")
        finally:
            d.stop()


if __name__ == "__main__":
    main()
