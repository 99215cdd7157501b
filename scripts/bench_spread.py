#!/usr/bin/env python3
"""Folds several full runs of scripts/bench.py into one view of their spread.

    python scripts/bench_spread.py [RUN.json ...] [--out bench/results/spread.md] [--doc docs/benchmarks.md]

Without files it reads every run make bench kept in bench/results/runs/. It
writes a table of the runs (date, commit, CPU model, cores, load average at
the start and at the end), the headline figures of every run side by side
with their range, and per target whether it is met across the runs: met only
when every run met it. With --doc it also puts that text between the
spread markers of the given Markdown file (docs/benchmarks.md has them)."""
import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from benchmark.common import write_atomic  # noqa: E402
from benchmark.spread import load_runs, replace_section, spread_markdown  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="bench JSON files (default bench/results/runs/*.json)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "spread.md"))
    ap.add_argument("--doc", help="a Markdown file whose spread section to rewrite")
    args = ap.parse_args()
    paths = args.runs or sorted(glob.glob(os.path.join(REPO, "bench", "results", "runs", "*.json")))
    runs = load_runs(paths)
    if not runs:
        raise SystemExit("no full runs to fold (make bench keeps each in bench/results/runs/)")
    text = spread_markdown(runs)
    write_atomic(args.out, text)
    if args.doc:
        replace_section(args.doc, text)
    print(text)
    print(f"wrote {args.out}" + (f" and the spread section of {args.doc}" if args.doc else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
