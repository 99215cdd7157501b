#!/usr/bin/env python3
"""The loaders users would otherwise pick, on the benchmark's corpus. Run by
scripts/bench.py in the benchmark's own environment (bench/.venv: torch,
torchdata, mosaicml-streaming, pinned in bench/requirements.txt).

    bench/.venv/bin/python scripts/bench_peers.py --prefix CORPUS --mds DIR [--seconds 4 --repeats 3]

Every loader serves the same thing: non-overlapping windows of seq_len + 1
tokens over the corpus's .bin (documents already joined, as a Megatron or
nanoGPT-style dataset reads them), shuffled, batch 8, `--workers` worker
processes, and the trainer side copies each batch once into a staging buffer,
as the dataloaderd clients do. The first batch (worker start-up) is not timed.

  peer_torch      torch.utils.data.DataLoader over a map-style dataset of a numpy.memmap
  peer_stateful   torchdata.stateful_dataloader.StatefulDataLoader, same dataset
  peer_streaming  streaming.StreamingDataset over an MDS copy of the windows
                  (written once into --mds; the conversion time is reported apart)

and, with --cpu-ranks N (the dataloaderd rows' 8), what the DataLoader over
the memmap costs the host: N rank processes (each its own DataLoader with a
DistributedSampler and --workers workers, as torchrun would start them),
first each taking a batch every --interval seconds for --paced-seconds, then
as fast as they can for --seconds; each rank reports its own CPU time and
its workers' (user + system) over the timed window.

Prints one JSON line: {"rows": {key: [samples per repeat]}, "info": {...}}.
Also `--rank SPEC` (internal): one rank process of the CPU-cost runs.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from benchmark.cpu import children_cpu_seconds, own_cpu_seconds


def log(msg):
    print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Windows(Dataset):
    """Window i: tokens [i*(seq_len+1), (i+1)*(seq_len+1)) of a memmap, as int32."""

    def __init__(self, path, seq_len, dtype=np.uint16):
        self.path, self.line, self.dtype = path, seq_len + 1, dtype
        self.n = os.path.getsize(path) // np.dtype(dtype).itemsize // self.line
        self.mm = None  # opened lazily in each worker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.mm is None:
            self.mm = np.memmap(self.path, dtype=self.dtype, mode="r")
        return torch.from_numpy(self.mm[i * self.line:(i + 1) * self.line].astype(np.int32))


def timed(loader, seconds, batch, line):
    """tokens/s of iterating loader for `seconds`, copying each batch once."""
    staging = torch.empty((batch, line), dtype=torch.int32)
    it = iter(loader)
    first = next(it)
    staging[:first["tokens"].shape[0] if isinstance(first, dict) else first.shape[0]].copy_(
        first["tokens"] if isinstance(first, dict) else first)
    tokens, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            b = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        if isinstance(b, dict):
            b = b["tokens"]
        staging[:b.shape[0]].copy_(b)
        tokens += b.numel()
    rate = tokens / (time.perf_counter() - t0)
    del it
    return rate


def mds_convert(bin_path, out, seq_len):
    """Writes every window of the corpus as one MDS sample (uint16 ndarray)."""
    from streaming import MDSWriter
    if os.path.exists(out):
        shutil.rmtree(out)
    mm = np.memmap(bin_path, dtype=np.uint16, mode="r")
    line = seq_len + 1
    n = mm.size // line
    t0 = time.perf_counter()
    with MDSWriter(out=out, columns={"tokens": f"ndarray:uint16:{line}"}, compression=None,
                   size_limit=1 << 26) as w:
        for i in range(n):
            w.write({"tokens": np.asarray(mm[i * line:(i + 1) * line])})
    return time.perf_counter() - t0, n


def streaming_loader(mds, batch, workers, epoch_seed):
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    class Tokens(StreamingDataset):
        def __getitem__(self, i):
            return torch.from_numpy(super().__getitem__(i)["tokens"].astype(np.int32))

    clean_stale_shared_memory()
    ds = Tokens(local=mds, remote=None, shuffle=True, shuffle_seed=epoch_seed, batch_size=batch)
    return DataLoader(ds, batch_size=batch, num_workers=workers, persistent_workers=False)


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", help="the Megatron corpus prefix (PREFIX.bin, uint16)")
    ap.add_argument("--mds", help="folder for the MDS copy (reused when its stamp matches)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--cpu-ranks", type=int, default=0, help="rank processes of the CPU-cost runs (0: none)")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between a rank's batches, paced")
    ap.add_argument("--paced-seconds", type=float, default=10.0)
    ap.add_argument("--rank", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.rank and not (args.prefix and args.mds):
        ap.error("--prefix and --mds are required")
    return args


def loader_rates(args, line):
    """peer_torch and peer_stateful: one trainer process, tokens/s per repeat."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    rates = {"peer_torch": [], "peer_stateful": []}
    ds = Windows(args.prefix + ".bin", args.seq_len)
    for r in range(args.repeats):
        g = torch.Generator().manual_seed(r)
        dl = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers, generator=g)
        rates["peer_torch"].append(timed(dl, args.seconds, args.batch, line))
        g = torch.Generator().manual_seed(r)
        sdl = StatefulDataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers, generator=g)
        rates["peer_stateful"].append(timed(sdl, args.seconds, args.batch, line))
        log(f"repeat {r}: torch {rates['peer_torch'][-1]:,.0f}, stateful {rates['peer_stateful'][-1]:,.0f} tokens/s")
    return rates


def mds_copy(args, line):
    """The MDS copy of the corpus: its stamp ({source, seconds, samples}) and
    whether this run wrote it."""
    bin_path = args.prefix + ".bin"
    stamp = os.path.join(args.mds, "bench-stamp.json")
    st = os.stat(bin_path)
    want = {"bin": os.path.abspath(bin_path), "size": st.st_size, "mtime": st.st_mtime, "line": line}
    try:
        with open(stamp) as f:
            conv = json.load(f)
        if conv["source"] == want:
            log(f"reusing MDS copy in {args.mds}")
            return conv, False
    except (OSError, ValueError, KeyError):
        pass
    log(f"converting the corpus to MDS in {args.mds}")
    seconds, n = mds_convert(bin_path, os.path.join(args.mds, "data"), args.seq_len)
    conv = {"source": want, "seconds": seconds, "samples": n}
    with open(stamp, "w") as f:
        json.dump(conv, f)
    log(f"MDS conversion: {seconds:.1f} s for {n} samples")
    return conv, True


def streaming_rates(args, line):
    rates = []
    for r in range(args.repeats):
        dl = streaming_loader(os.path.join(args.mds, "data"), args.batch, args.workers, r)
        rates.append(timed(dl, args.seconds, args.batch, line))
        log(f"repeat {r}: streaming {rates[-1]:,.0f} tokens/s")
        del dl
    return rates


def cpu_window(dl, it, staging, seconds, interval):
    """Takes batches for `seconds`, each copied once, a batch every interval
    seconds (None: as fast as they come); this process's CPU time and its
    children's (the DataLoader's workers) over the window."""
    kids0, own0 = children_cpu_seconds(), own_cpu_seconds()
    t0 = time.perf_counter()
    deadline, takes, tokens = t0, [], 0
    while (deadline if interval else time.perf_counter()) < t0 + seconds:
        if interval and deadline > time.perf_counter():
            time.sleep(deadline - time.perf_counter())
        try:
            b = next(it)
        except StopIteration:  # the end of this rank's share of an epoch
            it = iter(dl)
            continue
        takes.append(time.perf_counter())
        staging[:b.shape[0]].copy_(b)
        tokens += b.numel()
        if interval:
            deadline = max(deadline + interval, takes[-1])
    elapsed = time.perf_counter() - t0
    own, kids = own_cpu_seconds() - own0, children_cpu_seconds() - kids0
    gaps = np.diff(takes) if len(takes) > 1 else np.array([elapsed])
    return {"tokens": tokens, "seconds": elapsed, "ranks_cpu_s": own, "workers_cpu_s": kids,
            "batches": len(takes), "interval_s": float(gaps.mean()), "interval_max_s": float(gaps.max())}


def rank_main(spec):
    """One rank of the CPU-cost runs: a DataLoader over the memmap with a
    DistributedSampler; for each mode, a first batch (workers started), then
    ready, then the window once told to go."""
    torch.set_num_threads(1)
    ds = Windows(spec["bin"], spec["seq_len"])
    sampler = DistributedSampler(ds, num_replicas=spec["ranks"], rank=spec["rank"], shuffle=True, seed=spec["seed"])
    dl = DataLoader(ds, batch_size=spec["batch"], sampler=sampler, num_workers=spec["workers"])
    staging = torch.empty((spec["batch"], spec["seq_len"] + 1), dtype=torch.int32)
    for seconds, interval in ((spec["paced_seconds"], spec["interval"]), (spec["seconds"], None)):
        it = iter(dl)
        first = next(it)
        staging[:first.shape[0]].copy_(first)
        print("ready", flush=True)
        sys.stdin.readline()
        print(json.dumps(cpu_window(dl, it, staging, seconds, interval)), flush=True)
        del it


def rank_window(procs):
    """Waits until every rank is ready, tells them to go, and returns their
    results and the wall time from go to the last result."""
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a rank failed to start (exit {p.wait()})")
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        line = p.stdout.readline()
        if not line.strip():
            raise RuntimeError(f"a rank exited {p.wait()} before reporting")
        results.append(json.loads(line))
    return results, time.perf_counter() - t0


def cpu_rows(runs):
    """The peer CPU-cost rows from each repeat's (results, wall) per mode."""
    rows = {}
    for mode, per_repeat in runs.items():
        for name in ("workers", "ranks", "total"):
            rows[f"peer_cpu_{name}_{mode}"] = []
        for results, wall in per_repeat:
            tokens = sum(x["tokens"] for x in results)
            workers = sum(x["workers_cpu_s"] for x in results)
            ranks = sum(x["ranks_cpu_s"] for x in results)
            rows[f"peer_cpu_workers_{mode}"].append(workers / tokens * 1e9)
            rows[f"peer_cpu_ranks_{mode}"].append(ranks / tokens * 1e9)
            rows[f"peer_cpu_total_{mode}"].append((workers + ranks) / tokens * 1e9)
            if mode == "paced":
                rows.setdefault("peer_interval_paced", []).append(float(np.mean([x["interval_s"] for x in results])))
                rows.setdefault("peer_cores_paced", []).append((workers + ranks) / wall)
            else:
                rows.setdefault("peer_torch_8", []).append(sum(x["tokens"] / x["seconds"] for x in results))
    return rows


def cpu_cost(args):
    """--cpu-ranks rank processes per repeat, each running the paced window,
    then the full-speed one: (rows, info)."""
    runs = {"paced": [], "full": []}
    for r in range(args.repeats):
        specs = [{"bin": args.prefix + ".bin", "seq_len": args.seq_len, "batch": args.batch,
                  "workers": args.workers, "ranks": args.cpu_ranks, "rank": i, "seed": r, "seconds": args.seconds,
                  "paced_seconds": args.paced_seconds, "interval": args.interval} for i in range(args.cpu_ranks)]
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", json.dumps(s)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for s in specs]
        try:
            for mode in ("paced", "full"):
                runs[mode].append(rank_window(procs))
            for p in procs:
                p.stdin.close()
                if p.wait(timeout=120) != 0:
                    raise RuntimeError(f"a rank exited {p.returncode}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        so_far = cpu_rows(runs)
        log(f"repeat {r}: {args.cpu_ranks} DataLoader ranks, CPU-s per 1e9 tokens: "
            f"paced {so_far['peer_cpu_total_paced'][-1]:,.1f}, full speed {so_far['peer_cpu_total_full'][-1]:,.1f}")
    info = {"ranks": args.cpu_ranks, "workers_per_rank": args.workers, "interval_s": args.interval,
            "paced_seconds": args.paced_seconds, "full_seconds": args.seconds,
            "sampler": "DistributedSampler(shuffle=True)", "cpu": "getrusage of each rank (RUSAGE_SELF) and of its "
            "children (RUSAGE_CHILDREN plus /proc/<pid>/stat of the live ones) over the window",
            "runs": {mode: [r for r, _ in per] for mode, per in runs.items()}}
    return cpu_rows(runs), info


def main():
    args = parse_args()
    if args.rank:
        rank_main(json.loads(args.rank))
        return
    import streaming
    import torchdata

    torch.set_num_threads(1)
    line = args.seq_len + 1
    rows = loader_rates(args, line)
    conv, converted = mds_copy(args, line)
    mds_bytes = sum(os.path.getsize(os.path.join(dp, f))
                    for dp, _, fs in os.walk(os.path.join(args.mds, "data")) for f in fs)
    rows["peer_streaming"] = streaming_rates(args, line)
    rows["mds_convert"] = [conv["seconds"]]
    info = {"torch": torch.__version__, "torchdata": torchdata.__version__, "mosaicml-streaming": streaming.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0], "workers": args.workers,
            "mds_samples": conv["samples"], "mds_bytes": mds_bytes, "mds_convert_seconds": conv["seconds"],
            "mds_converted_in_this_run": converted}
    if args.cpu_ranks:
        cpu, info["cpu_cost"] = cpu_cost(args)
        rows.update(cpu)
    print(json.dumps({"rows": rows, "info": info}))


if __name__ == "__main__":
    main()
