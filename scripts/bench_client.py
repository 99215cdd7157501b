#!/usr/bin/env python3
"""Tokens/s through the Python client, next to a plain memory copy of the same
bytes measured in the same run.

    python scripts/bench_client.py --daemon bin/dataloaderd [--seconds 5] [--corpus-mb 256]

It writes a random pre-tokenized Megatron corpus (uint16 tokens), starts the
daemon on a temp socket, and for each transport (shm, inline) iterates one
Loader (dp_size 1, seq_len 4096, batch 8) for --seconds, touching every
batch (a sum over input_ids, as a trainer's copy to the GPU would read it).
The ceiling is numpy copying the same number of bytes per batch from a large
buffer into a batch-sized one. Ratios are the figures to compare; absolute
numbers depend on the machine.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients", "python", "src"))
from dataloaderd import Loader  # noqa: E402
from daemon import running  # noqa: E402


def write_corpus(prefix, total_tokens, rng):
    lengths = []
    n = 0
    while n < total_tokens:
        length = int(rng.integers(64, 8192))
        lengths.append(length)
        n += length
    lengths = np.array(lengths, dtype=np.int32)
    tokens = rng.integers(1, 50000, size=int(lengths.sum()), dtype=np.uint16)
    tokens.tofile(prefix + ".bin")
    pointers = np.zeros(len(lengths), dtype=np.int64)
    pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * 2)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.uint64(1).tobytes())
        f.write(np.uint8(8).tobytes())  # uint16
        f.write(np.uint64(len(lengths)).tobytes())
        f.write(np.uint64(len(lengths) + 1).tobytes())
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
    return int(lengths.sum())


def copy_ceiling(batch_tokens, seconds):
    src = np.ones(64 << 20, dtype=np.int32)  # 256 MB, larger than any cache
    dst = np.empty(batch_tokens, dtype=np.int32)
    off, n, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if off + batch_tokens > src.size:
            off = 0
        np.copyto(dst, src[off:off + batch_tokens])
        off += batch_tokens
        n += 1
    return n * batch_tokens / (time.perf_counter() - t0)


def client_rate(config, sock, transport, seconds):
    with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport=transport,
                job=f"bench-{transport}") as loader:
        it = iter(loader)
        next(it)  # first batch: session open, ring mapped
        tokens, checksum, t0 = 0, 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            batch = next(it)
            tok = batch["tokens"]
            checksum += int(np.asarray(tok[:, 0]).sum())
            tokens += tok.size
        return tokens / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", default="bin/dataloaderd")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--corpus-mb", type=int, default=256)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "corpus")
        total = write_corpus(prefix, args.corpus_mb << 19, rng)
        sock = os.path.join(tmp, "d.sock")
        with running(args.daemon, sock, "--log-level", "warn"):
            config = {"seq_len": 4096, "batch_size": 8, "seed": 1, "logical_shards": 256, "eos_id": 0,
                      "datasets": [{"name": "web", "path": prefix, "format": "megatron"}]}
            batch_tokens = 8 * 4097
            ceiling = copy_ceiling(batch_tokens, args.seconds)
            results = {"corpus_tokens": total, "copy_ceiling_tokens_per_s": ceiling}
            for transport in ("shm", "inline"):
                rate = client_rate(config, sock, transport, args.seconds)
                results[f"{transport}_tokens_per_s"] = rate
                results[f"{transport}_ratio_to_copy"] = rate / ceiling
    print(f"corpus: {total:,} tokens; seq_len 4096, batch 8, one client process")
    print(f"{'path':<22}{'tokens/s':>16}{'ratio to copy':>16}")
    print(f"{'numpy copy (ceiling)':<22}{ceiling:>16,.0f}{1.0:>16.3f}")
    for transport in ("shm", "inline"):
        print(f"{'client ' + transport:<22}{results[transport + '_tokens_per_s']:>16,.0f}"
              f"{results[transport + '_ratio_to_copy']:>16.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
