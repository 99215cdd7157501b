#!/usr/bin/env python3
"""Encodes the real-text documents of the conformance set with the references on one thread
(tiktoken's encode_ordinary; Hugging Face tokenizers' encode for tokenizer.json files) and
with internal/tokenize (BenchmarkEncode, one core) in the same run, and prints the ratio.

Usage: scripts/tokenizer_bench.py --conformance DIR [--rounds 3] [--only NAME,...]

scripts/bench.py imports bench_texts, reference_encoder and go_encode_rates to put the same
comparison (tiktoken encodings only) into the one benchmark table.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_KINDS = {"go", "go-testdata", "python", "man", "catalogs"}  # as in bench_test.go
GO_LINE = re.compile(r"BenchmarkEncode/(\S+?)(?:-\d+)?\s+\d+\s+\d+ ns/op\s+([\d.]+) MB/s\s+([\d.e+]+) tokens/s")


def bench_texts(conformance):
    """The manifest and the documents BenchmarkEncode encodes (the real-text kinds), as bytes."""
    with open(os.path.join(conformance, "manifest.json")) as f:
        man = json.load(f)
    docs = []
    for d in man["docs"]:
        if d["kind"] in BENCH_KINDS:
            with open(os.path.join(conformance, "docs", d["file"]), "rb") as f:
                docs.append(f.read())
    return man, docs


def reference_encoder(run, vocab):
    """(encode(texts) -> tokens, description) of the reference for one tokenizers_run entry."""
    if run["kind"] == "tiktoken":
        import tiktoken
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from tokenizer_conformance import tiktoken_encoding
        enc = tiktoken_encoding(run["name"], vocab)
        return (lambda texts: sum(len(enc.encode_ordinary(t)) for t in texts),
                f"tiktoken {tiktoken.__version__} encode_ordinary")
    import tokenizers
    tk = tokenizers.Tokenizer.from_file(run["path"])
    tk.encode_special_tokens = True
    return (lambda texts: sum(len(tk.encode(t, add_special_tokens=False).ids) for t in texts),
            f"tokenizers {tokenizers.__version__} encode")


def go_encode_rates(conformance, names, passes, count=1, procs=1, binary=None):
    """{name: [(bytes/s, tokens/s), ...]} of BenchmarkEncode on one core, -benchtime passes x,
    -count count. binary is a compiled `go test -c` of ./internal/tokenize (else go test runs).
    procs > 1 runs that many copies at the same time (one core each) and returns each
    process's samples in turn: their sum is the all-core rate."""
    pattern = "^BenchmarkEncode/(" + "|".join(re.escape(n) for n in names) + ")$"
    env = dict(os.environ, DATALOADERD_TOKENIZE_CONFORMANCE=os.path.abspath(conformance))
    if binary:
        cmd = [binary, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", f"{passes}x",
               "-test.cpu", "1", "-test.count", str(count)]
        cwd = os.path.join(REPO, "internal", "tokenize")
    else:
        cmd = ["go", "test", "-run", "^$", "-bench", pattern, "-benchtime", f"{passes}x",
               "-cpu", "1", "-count", str(count), "./internal/tokenize/"]
        cwd = REPO
    ps = [subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for _ in range(procs)]
    outs = [p.communicate() for p in ps]
    rates = {}
    for p, (stdout, stderr) in zip(ps, outs):
        if p.returncode != 0:
            raise RuntimeError(f"BenchmarkEncode failed:\n{stdout}\n{stderr}")
        for line in stdout.splitlines():
            m = GO_LINE.match(line)
            if m:
                rates.setdefault(m.group(1), []).append((float(m.group(2)) * 1e6, float(m.group(3))))
    missing = [n for n in names if n not in rates]
    if missing:
        raise RuntimeError(f"BenchmarkEncode printed no result for {missing}:\n" + "\n".join(o for o, _ in outs))
    return rates


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
    man, docs = bench_texts(a.conformance)
    texts = [d.decode("utf-8") for d in docs]
    size = sum(len(d) for d in docs)
    only = set(filter(None, a.only.split(",")))
    runs = [r for r in man["tokenizers_run"] if not only or r["name"] in only]

    ref = {}
    for r in runs:
        encode, what = reference_encoder(r, man["vocab"])
        encode(texts)  # warm up
        dt, n = best_of(a.rounds, lambda: encode(texts))
        ref[r["name"]] = (size / dt, n / dt, what)

    try:
        ours = {k: v[0] for k, v in go_encode_rates(a.conformance, [r["name"] for r in runs], a.rounds).items()}
    except RuntimeError as e:
        sys.exit(str(e))

    print(f"{len(docs)} documents, {size / 1e6:.2f} MB of text; one core each; best of {a.rounds}")
    print(f"{'tokenizer':16} {'Go MB/s':>8} {'Go Mtok/s':>9} {'ref MB/s':>8} {'ref Mtok/s':>10} {'ratio':>6}  reference")
    for name, (rb, rt, what) in ref.items():
        gb, gt = ours.get(name, (0.0, 0.0))
        print(f"{name:16} {gb / 1e6:8.2f} {gt / 1e6:9.3f} {rb / 1e6:8.2f} {rt / 1e6:10.3f} {gt / rt:6.2f}x  {what}")


if __name__ == "__main__":
    main()
