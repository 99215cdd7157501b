"""What every part of the benchmark shares: the workload's geometry, the
repository's paths, logging and the summary of a row's samples."""
import os
import statistics
import sys
import time

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(SCRIPTS)
BENCH_PY = os.path.join(SCRIPTS, "bench.py")

SEQ_LEN = 4096
LINES = 8
LINE_TOKENS = SEQ_LEN + 1
BATCH_TOKENS = LINES * LINE_TOKENS
SHARDS = 1024
EOS = 0
VOCAB = 50257


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def summary(samples):
    s = [float(x) for x in samples]
    return {"median": statistics.median(s), "min": min(s), "max": max(s), "samples": s}


def median(samples):
    return statistics.median(samples) if samples else None


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def rel(path):
    """path relative to the repository when it lies inside it."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path
