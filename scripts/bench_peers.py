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

Prints one JSON line: {"rates": {key: [tokens/s per repeat]}, "info": {...}}.
"""
import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True, help="the Megatron corpus prefix (PREFIX.bin, uint16)")
    ap.add_argument("--mds", required=True, help="folder for the MDS copy (reused when its stamp matches)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    import streaming
    import torchdata
    from torchdata.stateful_dataloader import StatefulDataLoader

    torch.set_num_threads(1)
    bin_path = args.prefix + ".bin"
    line = args.seq_len + 1
    rates = {"peer_torch": [], "peer_stateful": [], "peer_streaming": []}
    ds = Windows(bin_path, args.seq_len)
    for r in range(args.repeats):
        g = torch.Generator().manual_seed(r)
        dl = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers, generator=g)
        rates["peer_torch"].append(timed(dl, args.seconds, args.batch, line))
        g = torch.Generator().manual_seed(r)
        sdl = StatefulDataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers, generator=g)
        rates["peer_stateful"].append(timed(sdl, args.seconds, args.batch, line))
        log(f"repeat {r}: torch {rates['peer_torch'][-1]:,.0f}, stateful {rates['peer_stateful'][-1]:,.0f} tokens/s")

    stamp = os.path.join(args.mds, "bench-stamp.json")
    st = os.stat(bin_path)
    want = {"bin": os.path.abspath(bin_path), "size": st.st_size, "mtime": st.st_mtime, "line": line}
    converted = False
    try:
        with open(stamp) as f:
            conv = json.load(f)
        if conv["source"] != want:
            raise ValueError("stale")
        log(f"reusing MDS copy in {args.mds}")
    except (OSError, ValueError, KeyError):
        log(f"converting the corpus to MDS in {args.mds}")
        seconds, n = mds_convert(bin_path, os.path.join(args.mds, "data"), args.seq_len)
        conv = {"source": want, "seconds": seconds, "samples": n}
        converted = True
        with open(stamp, "w") as f:
            json.dump(conv, f)
        log(f"MDS conversion: {seconds:.1f} s for {n} samples")
    mds_bytes = sum(os.path.getsize(os.path.join(dp, f))
                    for dp, _, fs in os.walk(os.path.join(args.mds, "data")) for f in fs)
    for r in range(args.repeats):
        dl = streaming_loader(os.path.join(args.mds, "data"), args.batch, args.workers, r)
        rates["peer_streaming"].append(timed(dl, args.seconds, args.batch, line))
        log(f"repeat {r}: streaming {rates['peer_streaming'][-1]:,.0f} tokens/s")
        del dl
    rates["mds_convert"] = [conv["seconds"]]
    info = {"torch": torch.__version__, "torchdata": torchdata.__version__, "mosaicml-streaming": streaming.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0], "workers": args.workers,
            "mds_samples": conv["samples"], "mds_bytes": mds_bytes, "mds_convert_seconds": conv["seconds"],
            "mds_converted_in_this_run": converted}
    print(json.dumps({"rates": rates, "info": info}))


if __name__ == "__main__":
    main()
