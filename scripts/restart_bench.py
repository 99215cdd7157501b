#!/usr/bin/env python3
"""Time from a daemon restart to the next batch in hand: a loader iterates,
the daemon is killed (-9) and started again on the same socket, and the time
from starting the new daemon to the loader's next batch is measured (the
daemon's start, the loader noticing, reopening its session from its kept
state, the daemon moving its cursors to the loader's step).

    python scripts/restart_bench.py --prefix bench/.corpus/corpus [--jsonl FILE --vocab DIR] [--repeats 5]

Pre-tokenized: the Megatron corpus at --prefix, 1024 logical shards, seq_len
4096, 8 lines a batch (the benchmark's workload). Text on the fly: --jsonl
with cl100k_base. Prints the median, min and max per workload."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python", "src"))

from dataloaderd import Loader  # noqa: E402


def start(binary, sock, extra):
    proc = subprocess.Popen([binary, "serve", "--socket", sock, "--log-level", "error", *extra])
    return proc


def wait_ready(binary, sock):
    for _ in range(500):
        if subprocess.run([binary, "healthcheck", "--socket", sock, "--timeout", "1s"],
                          capture_output=True).returncode == 0:
            return
        time.sleep(0.01)
    raise RuntimeError("the daemon did not start")


def measure(binary, config, extra, repeats, label):
    times, retaken = [], []
    with tempfile.TemporaryDirectory() as work:
        sock = os.path.join(work, "d.sock")
        proc = start(binary, sock, extra)
        wait_ready(binary, sock)
        with Loader(config, socket=sock, dp_rank=0, dp_size=1, job="restart") as loader:
            it = iter(loader)
            for r in range(repeats):
                for _ in range(20 + 7 * r):  # a different distance from the kept state each time
                    next(it)
                proc.kill()
                proc.wait()
                before = loader.reconnects
                t0 = time.perf_counter()
                proc = start(binary, sock, extra)
                # Batches the dead daemon had published come first; the one
                # that counts is the first after the session was reopened.
                while loader.reconnects == before:
                    next(it)
                times.append(time.perf_counter() - t0)
                retaken.append(loader._last_step % 32)  # about the steps past the kept state
        proc.terminate()
        proc.wait()
    print(f"{label}: restart to next batch median {statistics.median(times):.3f} s "
          f"(min {min(times):.3f}, max {max(times):.3f}, {repeats} restarts; steps past the kept state about "
          f"{sorted(retaken)})", flush=True)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "bin", "dataloaderd"))
    ap.add_argument("--prefix", required=True, help="a Megatron corpus prefix (scripts/bench.py writes one)")
    ap.add_argument("--jsonl", help="a JSONL text file for the on-the-fly row")
    ap.add_argument("--vocab", default=os.path.join(REPO, ".tools", "tokenize", "vocab"))
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    config = {"seq_len": 4096, "batch_size": 8, "seed": 1, "logical_shards": 1024, "eos_id": 0,
              "datasets": [{"name": "bench", "path": a.prefix, "format": "megatron"}]}
    measure(a.bin, config, [], a.repeats, "pre-tokenized, 1024 shards")
    if a.jsonl:
        text = {"seq_len": 4096, "batch_size": 8, "seed": 1, "logical_shards": 64, "eos_id": 100257,
                "datasets": [{"name": "text", "path": a.jsonl, "format": "jsonl", "tokenizer": "cl100k_base"}]}
        measure(a.bin, text, ["--tokenizer-dir", a.vocab], a.repeats, "JSONL on the fly, cl100k_base, 64 shards")


if __name__ == "__main__":
    main()
