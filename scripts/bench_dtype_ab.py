#!/usr/bin/env python3
"""One shm client's tokens/s with the Loader's default dtype (int64 keys)
and with dtype="int32", alternating run by run on one daemon; with --before,
also the client of another tree, interleaved with this one's, for an A/B of
a client change on the same machine at the same time:

    mkdir -p /tmp/ab/before && git archive <commit> clients/python/src | tar -x -C /tmp/ab/before
    cp -r scripts /tmp/ab/before/      # this tree's benchmark, the old client
    python scripts/bench_dtype_ab.py --before /tmp/ab/before

The corpus is the benchmark's (1 GB, generated once into --workdir).
docs/benchmarks.md, "The default dtype"."""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from benchmark import clients, corpus, endtoend  # noqa: E402
from benchmark.daemon import daemon  # noqa: E402

DTYPES = {"default": None, "int32": "int32"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--daemon", default=os.path.join(os.path.dirname(HERE), "bin", "dataloaderd"))
    ap.add_argument("--before", help="a tree with scripts/bench.py and clients/python/src: its client runs too")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "dataloaderd-ab-corpus"))
    ap.add_argument("--corpus-gb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    trees = {"after": os.path.join(HERE, "bench.py")}
    if args.before:
        trees = {"before": os.path.join(args.before, "scripts", "bench.py"), **trees}
    prefix, _, _ = corpus.prepare_corpora(args.workdir, int(args.corpus_gb * 1e9 / 2), 20, seed=1)
    got = {(t, d): [] for t in trees for d in DTYPES}
    with tempfile.TemporaryDirectory() as tmp, daemon(args.daemon, tmp, "ab") as d:
        for r in range(args.repeats):
            for tree, bench in trees.items():
                clients.BENCH_PY = bench  # the client process: that tree's bench.py and client
                for name, dtype in DTYPES.items():
                    rate = endtoend.rate_run(d, prefix, "shm", 1, args.seconds, f"ab-{tree}-{name}-{r}", dtype=dtype)
                    got[(tree, name)].append(rate)
                    print(f"repeat {r} {tree:6} {name:7} {rate / 1e6:8.1f} M tokens/s", flush=True)
    for tree in trees:
        cell = {n: got[(tree, n)] for n in DTYPES}
        text = ", ".join(f"{n} {statistics.median(v) / 1e6:.1f} M [{min(v) / 1e6:.1f} to {max(v) / 1e6:.1f}]"
                         for n, v in cell.items())
        ratio = statistics.median(cell["default"]) / statistics.median(cell["int32"])
        print(f"{tree:6}: {text}; default / int32 {ratio:.3f}")


if __name__ == "__main__":
    main()
