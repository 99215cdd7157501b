#!/usr/bin/env python3
"""The dataloaderd benchmark: one run, one table.

    python scripts/bench.py --daemon bin/dataloaderd [--quick] [--out bench/results]

What it measures, on a generated Megatron corpus (uint16 tokens, log-normal
document lengths) with seq_len 4096 and 8 lines per batch per rank:

  ceiling      a plain memory copy of the same bytes: Go (`go test -bench
               BenchmarkCorpusCopyCeiling`) and numpy (np.copyto, in this process)
  pipeline     the daemon's pipeline alone on the same corpus, one core
               (BenchmarkCorpusRank: into a buffer; BenchmarkCorpusPipeline:
               into a ring of 8 slots with a consumer taking each batch)
  end to end   tokens/s delivered to 1, 2 and 8 client processes on the shm and
               the inline transport, each client copying every batch once into
               a staging buffer as a trainer's host-to-device copy would
  wait         the time one client spends inside next() while the daemon is
               ahead (p50, p99)
  CPU cost     daemon and client CPU-seconds per 1e9 tokens for 8 ranks taking
               a batch every 100 ms (a trainer's pace) and at full speed
  startup      time to first batch on a 1x and a 20x corpus (the 20x one is a
               sparse .bin), state save time and size at 1024 logical shards,
               the daemon's peak RSS (VmHWM)
  peers        the same workload through a PyTorch DataLoader over a
               numpy.memmap, torchdata's StatefulDataLoader and Mosaic
               Streaming, and the DataLoader's CPU cost for 8 ranks, run by
               scripts/bench_peers.py in the benchmark's own environment
               (--peers-python, default bench/.venv/bin/python)
  tokenizer    tokens/s per core of internal/tokenize (BenchmarkEncode) next to
               tiktoken's encode_ordinary (one thread) on the same text, for
               r50k_base, cl100k_base and o200k_base; and cl100k_base on all
               cores on the text of the JSONL corpus (the text rows' ceiling)
  text         a JSONL corpus made from the text on this machine (source code,
               man pages, package docs, message catalogs): tokens/s delivered
               to one shm client by a daemon tokenizing it on the fly, and of
               `dataloaderd prepare` on it, with all cores

Every figure is the median of --repeats runs, with min and max. Go rows are
compared with the Go copy, Python rows with the numpy copy (the same np.copyto
a client does to touch its batch). docs/benchmarks.md explains each row. A
full run also keeps its JSON in OUT/runs/; scripts/bench_spread.py folds those
runs into one table of their spread.

Also `--client` (internal): one client process of the end-to-end runs.
"""
import argparse
import datetime
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python", "src"))
sys.path.insert(0, HERE)

from benchmark import common, corpus, endtoend, gobench, peers, report, targets, text  # noqa: E402
from benchmark.clients import client_main  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--daemon", default=os.path.join(REPO, "bin", "dataloaderd"))
    ap.add_argument("--quick", action="store_true",
                    help="tiny corpus, one repeat, short runs, peers only if their environment exists")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"),
                    help="folder for bench.json and bench.md (quick.json and quick.md with --quick)")
    ap.add_argument("--workdir", default=None,
                    help="where the generated corpora are kept and reused (default bench/.corpus, a temp dir with --quick)")
    ap.add_argument("--corpus-gb", type=float, default=1.0, help="size of the 1x corpus's .bin")
    ap.add_argument("--sparse-times", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each end-to-end and peer run")
    ap.add_argument("--go-benchtime", default="2s")
    ap.add_argument("--clients", default="1,2,8")
    ap.add_argument("--cpu-ranks", type=int, default=8, help="client ranks of the CPU-cost runs")
    ap.add_argument("--interval", type=float, default=0.1,
                    help="seconds between a rank's batches in the paced CPU-cost runs (a trainer's step)")
    ap.add_argument("--paced-seconds", type=float, default=10.0, help="length of each paced CPU-cost run")
    ap.add_argument("--peers-python", default=os.path.join(REPO, "bench", ".venv", "bin", "python"))
    ap.add_argument("--peer-workers", type=int, default=2)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--vocab", default=os.environ.get("DATALOADERD_TOKENIZER_VOCAB") or
                    os.path.join(REPO, ".tools", "tokenize", "vocab"),
                    help="the tiktoken rank files (default $DATALOADERD_TOKENIZER_VOCAB, else .tools/tokenize/vocab)")
    ap.add_argument("--conformance", default=os.path.join(REPO, ".tools", "tokenize", "conformance"),
                    help="the conformance set whose real text the per-core tokenizer rows encode")
    ap.add_argument("--text-mb", type=float, default=300.0, help="size of the JSONL text corpus (MB)")
    ap.add_argument("--text-seconds", type=float, default=8.0,
                    help="length of each on-the-fly run (it also ends at 0.7 of an epoch)")
    ap.add_argument("--no-tokenize", action="store_true", help="skip the tokenizer and text rows")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.corpus_gb, args.repeats, args.seconds, args.go_benchtime = 0.02, 1, 0.5, "100ms"
        args.sparse_times = 20
        args.text_mb = min(args.text_mb, 4.0)
        args.text_seconds = args.seconds
        args.paced_seconds = min(args.paced_seconds, 1.0)
    return args


def token_rows(args, tmp, prefix, sparse):
    """Every row on the token corpus: ceilings, pipeline, end to end, wait,
    CPU cost, startup."""
    samples = gobench.ceiling_and_pipeline_rows(prefix, args.go_benchtime, args.repeats, min(args.seconds, 2.0))
    clients = [int(c) for c in args.clients.split(",")]
    samples.update(endtoend.end_to_end(args.daemon, tmp, prefix, clients, ("shm", "inline"), args.seconds,
                                       args.repeats, 50 if args.quick else 300))
    cpu, cpu_info = endtoend.cpu_cost(args.daemon, tmp, prefix, args.cpu_ranks, args.interval, args.paced_seconds,
                                      args.seconds, args.repeats)
    samples.update(cpu)
    save_repeats = 2 if args.quick else 5
    samples.update(endtoend.startup(args.daemon, tmp, prefix, "1x", args.repeats, save_repeats))
    samples.update(endtoend.startup(args.daemon, tmp, sparse, f"{args.sparse_times}x", args.repeats, 0))
    if args.sparse_times != 20:
        for row in ("ttfb", "rss", "anon"):
            samples[f"{row}_20x"] = samples.pop(f"{row}_{args.sparse_times}x")
    return samples, cpu_info


def measure(args, tmp):
    """All rows: (samples, info)."""
    workdir = args.workdir or (os.path.join(tmp, "corpus") if args.quick
                               else os.path.join(REPO, "bench", ".corpus"))
    prefix, sparse, corpus_info = corpus.prepare_corpora(workdir, int(args.corpus_gb * 1e9 / 2), args.sparse_times,
                                                         seed=1)
    samples, cpu_info = token_rows(args, tmp, prefix, sparse)
    text_samples, text_info = text.text_rows(args, tmp, workdir)
    samples.update(text_samples)
    peer_info = {"skipped": "--no-peers"}
    if not args.no_peers:
        rows, peer_info = peers.peers(args.peers_python, prefix, os.path.join(workdir, "mds"), args)
        samples.update(rows)
    return samples, {"corpus": corpus_info, "cpu_cost": cpu_info, "peers": peer_info, "tokenize": text_info}


def result_of(args, samples, info, started, load):
    result = {
        "version": 1,
        "mode": "quick" if args.quick else "full",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": report.git_commit(),
        "command": " ".join([common.rel(sys.executable)] + sys.argv),
        "seconds": round(time.time() - started, 1),
        "machine": report.machine(load),
        "workload": {"seq_len": common.SEQ_LEN, "lines_per_batch": common.LINES,
                     "tokens_per_batch": common.BATCH_TOKENS, "logical_shards": common.SHARDS,
                     "repeats": args.repeats, "run_seconds": args.seconds, "go_benchtime": args.go_benchtime,
                     "clients": [int(c) for c in args.clients.split(",")],
                     "touch": "np.copyto into a staging buffer", "peer_workers": args.peer_workers,
                     "cpu_ranks": args.cpu_ranks, "interval_s": args.interval, "paced_seconds": args.paced_seconds},
        **info,
        "rows": report.build_rows(samples),
    }
    result["targets"] = targets.targets(result["rows"])
    return result


def write_results(args, result):
    """NAME.json and NAME.md in --out; a full run also keeps its JSON in
    runs/ (named by its date) for scripts/bench_spread.py."""
    name = "quick" if args.quick else "bench"
    os.makedirs(args.out, exist_ok=True)
    data = json.dumps(result, indent=1) + "\n"
    common.write_atomic(os.path.join(args.out, name + ".json"), data)
    common.write_atomic(os.path.join(args.out, name + ".md"), report.run_markdown(result))
    if not args.quick:
        runs = os.path.join(args.out, "runs")
        os.makedirs(runs, exist_ok=True)
        stamp = result["date"].replace(":", "").replace("+0000", "Z")
        common.write_atomic(os.path.join(runs, f"bench-{stamp}.json"), data)
    print(report.text_table(result))
    print(f"\nload average {report.fmt_load(result['machine'])}")
    print(f"\nwrote {os.path.join(args.out, name + '.json')} and .md ({result['seconds']:.0f} s)")


def main():
    args = parse_args()
    if args.client:
        client_main(json.loads(args.client))
        return
    started, load = time.time(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dataloaderd-bench-") as tmp:
        samples, info = measure(args, tmp)
    write_results(args, result_of(args, samples, info, started, load))


if __name__ == "__main__":
    main()
