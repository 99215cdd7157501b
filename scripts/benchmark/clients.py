"""The client processes of the end-to-end runs. Each is `bench.py --client
SPEC`: it opens a Loader, takes a first batch, says ready, waits for go, then
runs its mode and prints one JSON line:

  rate    take and copy batches as fast as they come, for `seconds` (or until
          `max_tokens`)
  paced   take and copy a batch every `interval` seconds, for `seconds`, as a
          trainer whose step takes that long
  wait    after a head start, time next() with a short sleep between batches

rate and paced also report the process's own CPU seconds (user + system,
every thread: getrusage) over the timed window."""
import json
import subprocess
import sys
import time

import numpy as np

from .common import BENCH_PY, LINE_TOKENS, LINES
from .cpu import own_cpu_seconds


# The batch keys of the metadata fields a rate client copies with the tokens.
META_KEYS = ("position_ids", "document_ids", "cu_seqlens", "line_segments", "loss_mask", "dataset_ids")


def copy_metadata(batch, stagings):
    """Copies each metadata array of a batch once, as the tokens are."""
    for k in META_KEYS:
        if k in batch:
            a = np.asarray(batch[k]).ravel()
            st = stagings.get(k)
            if st is None or st.size < a.size or st.dtype != a.dtype:
                st = stagings[k] = np.empty(max(a.size, 1 << 16), dtype=a.dtype)
            np.copyto(st[:a.size], a)


def run_rate(it, staging, spec):
    max_tokens = spec.get("max_tokens") or float("inf")
    meta = bool(spec["config"].get("metadata"))
    stagings = {}
    cpu0 = own_cpu_seconds()
    tokens, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < spec["seconds"] and tokens < max_tokens:
        batch = next(it)
        tok = batch["tokens"]
        np.copyto(staging[:tok.shape[0]], tok)
        if meta:
            copy_metadata(batch, stagings)
        tokens += tok.size
    return {"tokens": tokens, "seconds": time.perf_counter() - t0, "cpu_s": own_cpu_seconds() - cpu0}


def run_paced(it, staging, spec):
    """A batch every `interval` seconds. A late batch moves the schedule
    instead of making the next ones come sooner: a trainer does not take two
    steps at once to catch up."""
    interval = spec["interval"]
    cpu0 = own_cpu_seconds()
    t0 = time.perf_counter()
    deadline, takes, tokens = t0, [], 0
    while deadline < t0 + spec["seconds"]:
        now = time.perf_counter()
        if deadline > now:
            time.sleep(deadline - now)
        tok = next(it)["tokens"]
        takes.append(time.perf_counter())
        np.copyto(staging[:tok.shape[0]], tok)
        tokens += tok.size
        deadline = max(deadline + interval, takes[-1])
    seconds = time.perf_counter() - t0
    gaps = np.diff(takes) if len(takes) > 1 else np.array([seconds])
    return {"tokens": tokens, "seconds": seconds, "cpu_s": own_cpu_seconds() - cpu0, "batches": len(takes),
            "interval_s": float(gaps.mean()), "interval_max_s": float(gaps.max())}


def run_wait(it, staging, spec):
    time.sleep(spec["head_start"])
    waits = []
    for _ in range(spec["batches"]):
        t0 = time.perf_counter_ns()
        tok = next(it)["tokens"]
        waits.append((time.perf_counter_ns() - t0) / 1e3)
        np.copyto(staging[:tok.shape[0]], tok)
        time.sleep(spec["step_seconds"])
    return {"p50_us": float(np.percentile(waits, 50)), "p99_us": float(np.percentile(waits, 99))}


MODES = {"rate": run_rate, "paced": run_paced, "wait": run_wait}


def client_main(spec):
    """One client process (bench.py --client SPEC). Also reports the time
    from Loader() to the first batch. The Loader has its default dtype
    (int64 input_ids, labels, shift_labels) unless the spec names one."""
    from dataloaderd import Loader
    staging = np.empty((LINES, LINE_TOKENS), dtype=np.int32)
    opened = time.perf_counter()
    options = {"dtype": spec["dtype"]} if spec.get("dtype") else {}  # none: the default, as Loader(cfg)
    with Loader(spec["config"], dp_rank=spec["rank"], dp_size=spec["size"], socket=spec["socket"],
                transport=spec["transport"], job=spec["job"], **options) as loader:
        it = iter(loader)
        first = next(it)
        first_batch_s = time.perf_counter() - opened
        np.copyto(staging, first["tokens"])
        print("ready", flush=True)
        sys.stdin.readline()
        result = MODES[spec["mode"]](it, staging, spec)
        result["first_batch_s"] = first_batch_s
        print(json.dumps(result), flush=True)
        if spec.get("hold"):  # keep the session open until told (the daemon is sampled meanwhile)
            sys.stdin.readline()


def start_clients(specs):
    """One process per spec; returns once every one took its first batch."""
    procs = [subprocess.Popen([sys.executable, BENCH_PY, "--client", json.dumps(s)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for s in specs]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a client failed to start (exit {p.wait()})")
    except BaseException:
        stop_clients(procs)
        raise
    return procs


def stop_clients(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def read_results(procs, hold):
    results = []
    for p in procs:
        if hold:
            line = p.stdout.readline()
            if not line.strip():
                raise RuntimeError(f"a client exited {p.wait()} before reporting")
        else:
            out, _ = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"a client exited {p.returncode}")
            line = out.strip().splitlines()[-1]
        results.append(json.loads(line))
    return results


def run_clients(specs, before_go=None, before_close=None):
    """Starts one process per spec, releases them together once all are
    ready, and returns their results. before_go runs just before the release.
    With before_close, the clients keep their sessions open after reporting
    until it has run."""
    hold = before_close is not None
    procs = start_clients([dict(s, hold=True) if hold else s for s in specs])
    try:
        if before_go:
            before_go()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = read_results(procs, hold)
        if hold:
            before_close()
            for p in procs:
                p.stdin.write("close\n")
                p.stdin.flush()
                p.stdin.close()
                if p.wait(timeout=600) != 0:
                    raise RuntimeError(f"a client exited {p.returncode}")
        return results
    finally:
        stop_clients(procs)
