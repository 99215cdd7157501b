"""The ceilings and the Go pipeline: `go test -bench` of the corpus
benchmarks on the generated corpus (one core), and np.copyto of one batch."""
import os
import re
import subprocess
import time

import numpy as np

from .common import BATCH_TOKENS, LINE_TOKENS, LINES, REPO, SHARDS, log

GO_LINE = re.compile(r"^(BenchmarkCorpus\w+?)(?:-\d+)?\s+\d+\s+.*?([\d.e+]+) tokens/s")
GUARD_LINE = re.compile(r"^BenchmarkCorpusPipelineGuard(?:-\d+)?\s+\d+\s+.*?([\d.e+]+) guard-ratio")
GO_BENCHMARKS = ("BenchmarkCorpusCopyCeiling", "BenchmarkCorpusRank", "BenchmarkCorpusPipeline",
                 "BenchmarkCorpusPipelineMetadata", "guard-ratio")


def go_benchmarks(prefix, benchtime, repeats):
    """The Go ceiling and pipeline benchmarks on the corpus, one core:
    {benchmark: [tokens/s per repeat]}. Each repeat runs every benchmark
    once, so that rows compared with each other (the pipeline with and
    without its fault guard or its metadata) are measured side by side
    rather than minutes apart."""
    env = dict(os.environ, DATALOADERD_BENCH_PREFIX=prefix, DATALOADERD_BENCH_SHARDS=str(SHARDS))
    cmd = ["go", "test", "-run", "^$", "-bench", "^BenchmarkCorpus", "-benchtime", benchtime,
           "-count", "1", "-cpu", "1", "./internal/stream/"]
    log(f"go ({repeats} times): " + " ".join(cmd))
    found = {}
    for _ in range(repeats):
        out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"go test failed:\n{out.stdout}\n{out.stderr}")
        for line in out.stdout.splitlines():
            g = GUARD_LINE.match(line)
            if g:
                found.setdefault("guard-ratio", []).append(float(g.group(1)))
                continue
            m = GO_LINE.match(line)
            if m:
                found.setdefault(m.group(1), []).append(float(m.group(2)))
    missing = [w for w in GO_BENCHMARKS if w not in found]
    if missing:
        raise RuntimeError(f"go test printed no result for {missing}:\n{out.stdout}")
    return {k: found[k] for k in GO_BENCHMARKS}


def numpy_copy(seconds):
    """tokens/s of np.copyto of one batch from a 256 MiB int32 buffer into a
    staging buffer: the same copy a client does to touch its batch."""
    src = np.arange(64 << 20, dtype=np.int32)
    dst = np.empty((LINES, LINE_TOKENS), dtype=np.int32)
    flat = dst.reshape(-1)
    off, n, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if off + BATCH_TOKENS > src.size:
            off = 0
        np.copyto(flat, src[off:off + BATCH_TOKENS])
        off += BATCH_TOKENS
        n += 1
    return n * BATCH_TOKENS / (time.perf_counter() - t0)


def ceiling_and_pipeline_rows(prefix, benchtime, repeats, numpy_seconds):
    """The rows go_copy, go_rank, go_pipeline, go_guard_ratio,
    go_pipeline_meta and numpy_copy."""
    go = go_benchmarks(prefix, benchtime, repeats)
    rows = {"go_copy": go["BenchmarkCorpusCopyCeiling"], "go_rank": go["BenchmarkCorpusRank"],
            "go_pipeline": go["BenchmarkCorpusPipeline"],
            "go_guard_ratio": go["guard-ratio"],
            "go_pipeline_meta": go["BenchmarkCorpusPipelineMetadata"],
            "numpy_copy": [numpy_copy(numpy_seconds) for _ in range(repeats)]}
    log(f"copy ceilings: Go {np.median(rows['go_copy']):,.0f}, numpy {np.median(rows['numpy_copy']):,.0f} tokens/s")
    return rows
