#!/usr/bin/env python3
"""End-to-end demo on real text: the Go source tree as a corpus.

    python scripts/demo.py --daemon bin/dataloaderd      (what `make demo` runs)

Builds a corpus from the .go files of `go env GOROOT` (one document per file,
byte-level tokens: byte value + 1, eos_id 0, Megatron uint16 files), starts
the daemon on a temp socket, runs two rank processes that save a checkpoint
part-way, resumes on three rank processes to the end of the epoch, and checks
exactness: the multiset of served tokens equals the corpus's, with nothing lost
and nothing repeated. Prints tokens/s per phase next to a plain numpy copy of
the same bytes measured in the same run. Exits non-zero if the check fails.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Tuple

import numpy as np
import numpy.typing as npt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "src"))
sys.path.insert(0, HERE)
from daemon import running  # noqa: E402

SEQ_LEN, BATCH, SHARDS = 2047, 8, 48


def build_corpus(out_prefix: str, max_bytes: int) -> Tuple[int, int, npt.NDArray[np.intp]]:
    goroot = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip()
    files = sorted(glob.glob(os.path.join(goroot, "src", "**", "*.go"), recursive=True))
    docs, total = [], 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        if not data:
            continue
        docs.append(np.frombuffer(data, dtype=np.uint8).astype(np.uint16) + 1)
        total += len(data)
        if total >= max_bytes:
            break
    lengths = np.array([len(d) for d in docs], dtype=np.int32)
    pointers = np.zeros(len(docs), dtype=np.int64)
    pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * 2)
    tokens = np.concatenate(docs)
    tokens.tofile(out_prefix + ".bin")
    with open(out_prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes())
        f.write(np.uint64(len(docs)).tobytes() + np.uint64(len(docs) + 1).tobytes())
        f.write(lengths.tobytes() + pointers.tobytes() + np.arange(len(docs) + 1, dtype=np.int64).tobytes())
    return len(docs), total, np.bincount(tokens, minlength=257)


def worker(a: Dict[str, Any]) -> None:
    """One rank: iterate (steps or to the end), save, report token counts. The
    time blocked in next() is kept apart from the time spent counting."""
    from dataloaderd import Loader
    counts = np.zeros(257, dtype=np.int64)
    n = tokens = 0
    waited = 0.0
    with Loader(a["config"], dp_rank=a["rank"], dp_size=a["size"], socket=a["socket"],
                resume_from=a["resume_from"], job=a["job"]) as loader:
        it = iter(loader)
        start = time.perf_counter()
        while not a["steps"] or n < a["steps"]:
            t0 = time.perf_counter()
            batch = next(it, None)
            waited += time.perf_counter() - t0
            if batch is None:
                break
            t = batch["tokens"]
            counts += np.bincount(t.ravel(), minlength=257)[:257]
            if t.max() > 256 or t.min() < 0:
                sys.exit(f"rank {a['rank']}: token {t.max()} outside the byte vocabulary")
            tokens += t.size
            n += 1
        elapsed = time.perf_counter() - start
        if a["save"]:
            loader.save(a["save"])
    np.save(a["out"], counts)
    print(json.dumps({"rank": a["rank"], "batches": n, "tokens": tokens, "seconds": elapsed,
                      "waited": waited}), flush=True)


def phase(name: str, size: int, common: Dict[str, Any], tmp: str,
          **kw: Any) -> Tuple[npt.NDArray[np.int64], float]:
    procs = []
    for r in range(size):
        args = dict(common, rank=r, size=size, out=os.path.join(tmp, f"{name}-{r}.npy"), **kw)
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(args)],
                                      stdout=subprocess.PIPE, text=True))
    start = time.perf_counter()
    reports = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - start
    if any(p.returncode for p in procs):
        sys.exit(f"{name}: a rank process failed")
    counts = sum(np.load(os.path.join(tmp, f"{name}-{r}.npy")) for r in range(size))
    tokens = sum(r["tokens"] for r in reports)
    busy = max(r["seconds"] for r in reports)
    waited = max(r["waited"] for r in reports)
    print(f"  {name}: {size} ranks, {sum(r['batches'] for r in reports)} batches, {tokens:,} tokens: "
          f"{tokens / busy:,.0f} tokens/s with the ranks counting every token, "
          f"{tokens / max(waited, 1e-9):,.0f} tokens/s counting only time blocked in next() "
          f"({wall:.2f} s wall with process start)")
    return counts, tokens / busy


def copy_ceiling(seconds: float = 1.0) -> float:
    n_tok = BATCH * (SEQ_LEN + 1)
    src, dst = np.ones(64 << 20, dtype=np.int32), np.empty(n_tok, dtype=np.int32)
    off = n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        off = 0 if off + n_tok > src.size else off
        np.copyto(dst, src[off:off + n_tok])
        off += n_tok
        n += 1
    return n * n_tok / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", default=os.path.join(HERE, "..", "bin", "dataloaderd"))
    ap.add_argument("--corpus-mb", type=float, default=16)
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "gosrc")
        docs, corpus_bytes, corpus_counts = build_corpus(prefix, int(args.corpus_mb * 1e6))
        print(f"corpus: {docs} Go source files, {int(corpus_counts.sum()):,} byte tokens (Megatron uint16)")
        sock = os.path.join(tmp, "d.sock")
        log = open(os.path.join(tmp, "daemon.log"), "w")
        with running(args.daemon, sock, "--allow-root", tmp, log=log):
            config = {"seq_len": SEQ_LEN, "batch_size": BATCH, "seed": 2026, "logical_shards": SHARDS,
                      "eos_id": 0, "epochs": 1,
                      "datasets": [{"name": "gosrc", "path": prefix, "format": "megatron"}]}
            ckpt = os.path.join(tmp, "checkpoint")
            common = {"config": config, "socket": sock}
            print(f"seq_len {SEQ_LEN}, batch {BATCH}, logical_shards {SHARDS}, one epoch")
            c1, r1 = phase("2 ranks, then save", 2, common, tmp, job="demo-2", steps=60, save=ckpt, resume_from=None)
            c2, r2 = phase("resume on 3 ranks to the end", 3, common, tmp, job="demo-3", steps=0, save=None,
                           resume_from=ckpt)
        ceiling = copy_ceiling()
        served = c1 + c2
        same_multiset = np.array_equal(served[1:], corpus_counts[1:])
        same_bytes = int(served[1:].sum()) == corpus_bytes
        ok = same_multiset and same_bytes
        print(f"numpy copy of the same bytes: {ceiling:,.0f} tokens/s; client path / copy: "
              f"{r1 / ceiling:.3f} (2 ranks), {r2 / ceiling:.3f} (3 ranks)")
        print(f"exactness: {int(served[1:].sum()):,} data tokens served; the documents hold {corpus_bytes:,} bytes: "
              f"{'equal' if same_bytes else 'DIFFERENT'}; multiset of served values equal to the corpus's: "
              f"{'yes' if same_multiset else 'NO'}")
        if not ok:
            diff = served[1:] - corpus_counts[1:]
            sys.exit(f"EXACTNESS FAILED: {int(np.abs(diff).sum())} tokens differ")
        print("OK: every token served exactly once across save and rescale (2 -> 3 ranks)")


if __name__ == "__main__":
    main()
