#!/usr/bin/env python3
"""Encodes the real-text documents of the conformance set with the references on one thread
(tiktoken's encode_ordinary; Hugging Face tokenizers' encode for tokenizer.json files) and
with internal/tokenize (BenchmarkEncode, one core) in the same run, and prints the ratio.

Usage: scripts/tokenizer_bench.py --conformance DIR [--rounds 3] [--only NAME,...]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tiktoken  # noqa: E402
import tokenizers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_conformance import tiktoken_encoding  # noqa: E402

BENCH_KINDS = {"go", "go-testdata", "python", "man", "catalogs"}  # as in bench_test.go


def best_of(rounds, fn):
    best = None
    for _ in range(rounds):
        t0 = time.perf_counter()
        n = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conformance", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    man = json.load(open(os.path.join(a.conformance, "manifest.json")))
    docs = [open(os.path.join(a.conformance, "docs", d["file"]), "rb").read()
            for d in man["docs"] if d["kind"] in BENCH_KINDS]
    texts = [d.decode("utf-8") for d in docs]
    size = sum(len(d) for d in docs)
    only = set(filter(None, a.only.split(",")))
    runs = [r for r in man["tokenizers_run"] if not only or r["name"] in only]

    ref = {}
    for r in runs:
        if r["kind"] == "tiktoken":
            enc = tiktoken_encoding(r["name"], man["vocab"])
            fn = lambda: sum(len(enc.encode_ordinary(t)) for t in texts)
            what = f"tiktoken {tiktoken.__version__} encode_ordinary"
        else:
            tk = tokenizers.Tokenizer.from_file(r["path"])
            tk.encode_special_tokens = True
            fn = lambda: sum(len(tk.encode(t, add_special_tokens=False).ids) for t in texts)
            what = f"tokenizers {tokenizers.__version__} encode"
        fn()  # warm up
        dt, n = best_of(a.rounds, fn)
        ref[r["name"]] = (size / dt, n / dt, what)

    pattern = "^BenchmarkEncode/(" + "|".join(re.escape(r["name"]) for r in runs) + ")$"
    env = dict(os.environ, DATALOADERD_TOKENIZE_CONFORMANCE=os.path.abspath(a.conformance))
    out = subprocess.run(["go", "test", "-run", "^$", "-bench", pattern, "-benchtime", f"{a.rounds}x",
                          "-cpu", "1", "-count", "1", "./internal/tokenize/"],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stdout + out.stderr)
    ours = {}
    for line in out.stdout.splitlines():
        m = re.match(r"BenchmarkEncode/(\S+)\s+\d+\s+\d+ ns/op\s+([\d.]+) MB/s\s+([\d.e+]+) tokens/s", line)
        if m:
            ours[m.group(1)] = (float(m.group(2)) * 1e6, float(m.group(3)))

    print(f"{len(docs)} documents, {size / 1e6:.2f} MB of text; one core each; best of {a.rounds}")
    print(f"{'tokenizer':16} {'Go MB/s':>8} {'Go Mtok/s':>9} {'ref MB/s':>8} {'ref Mtok/s':>10} {'ratio':>6}  reference")
    for name, (rb, rt, what) in ref.items():
        gb, gt = ours.get(name, (0.0, 0.0))
        print(f"{name:16} {gb / 1e6:8.2f} {gt / 1e6:9.3f} {rb / 1e6:8.2f} {rt / 1e6:10.3f} {gt / rt:6.2f}x  {what}")


if __name__ == "__main__":
    main()
