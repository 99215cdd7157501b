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
  startup      time to first batch on a 1x and a 20x corpus (the 20x one is a
               sparse .bin), state save time and size at 1024 logical shards,
               the daemon's peak RSS (VmHWM)
  peers        the same workload through a PyTorch DataLoader over a
               numpy.memmap, torchdata's StatefulDataLoader and Mosaic
               Streaming, run by scripts/bench_peers.py in the benchmark's own
               environment (--peers-python, default bench/.venv/bin/python)

Every figure is the median of --repeats runs, with min and max. Go rows are
compared with the Go copy, Python rows with the numpy copy (the same np.copyto
a client does to touch its batch). docs/benchmarks.md explains each row.

Also `--client` (internal): one client process of the end-to-end runs.
"""
import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import socket as socketlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python", "src"))
sys.path.insert(0, HERE)

SEQ_LEN = 4096
LINES = 8
LINE_TOKENS = SEQ_LEN + 1
BATCH_TOKENS = LINES * LINE_TOKENS
SHARDS = 1024
EOS = 0
VOCAB = 50257


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- corpus

def doc_lengths(rng, total_tokens):
    """Document lengths until total_tokens: log-normal (median ~660 tokens,
    mean ~1,400, a long tail clipped at 128k), as web text tokenizes."""
    out, n = [], 0
    while n < total_tokens:
        chunk = np.clip(rng.lognormal(6.5, 1.25, size=1 << 16), 8, 1 << 17).astype(np.int64)
        out.append(chunk)
        n += int(chunk.sum())
    lengths = np.concatenate(out)
    cut = int(np.searchsorted(np.cumsum(lengths), total_tokens)) + 1
    return lengths[:cut]


def write_idx(path, lengths, itemsize, dtype_code):
    n = len(lengths)
    pointers = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1] * itemsize, out=pointers[1:])
    with open(path, "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.uint64(1).tobytes())
        f.write(np.uint8(dtype_code).tobytes())
        f.write(np.uint64(n).tobytes())
        f.write(np.uint64(n + 1).tobytes())
        f.write(lengths.astype(np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(n + 1, dtype=np.int64).tobytes())


def write_corpus(prefix, total_tokens, seed):
    """A Megatron uint16 corpus of about total_tokens random tokens (EOS-free
    ids 1..VOCAB-1), written in chunks so memory stays small."""
    rng = np.random.default_rng(seed)
    lengths = doc_lengths(rng, total_tokens)
    total = int(lengths.sum())
    with open(prefix + ".bin", "wb") as f:
        left = total
        while left:
            n = min(left, 1 << 26)
            rng.integers(1, VOCAB, size=n, dtype=np.uint16).tofile(f)
            left -= n
    write_idx(prefix + ".idx", lengths, 2, 8)
    return lengths


def write_sparse_corpus(prefix, lengths, times):
    """A corpus `times` as large as lengths describes, whose .bin is a sparse
    file (truncate): no token byte is on disk, so only what is read costs."""
    big = np.tile(lengths, times)
    total = int(big.sum())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(total * 2)
    write_idx(prefix + ".idx", big, 2, 8)
    return total


def prepare_corpora(workdir, total_tokens, sparse_times, seed):
    """The 1x corpus and the sparse 20x one, reused when their parameters match."""
    os.makedirs(workdir, exist_ok=True)
    stamp_path = os.path.join(workdir, "corpus.json")
    want = {"tokens": total_tokens, "seed": seed, "sparse_times": sparse_times, "format": 2}
    prefix = os.path.join(workdir, "corpus")
    sparse = os.path.join(workdir, f"corpus{sparse_times}x")
    try:
        with open(stamp_path) as f:
            have = json.load(f)
        if have["params"] == want and all(os.path.exists(p) for p in
                                          (prefix + ".bin", prefix + ".idx", sparse + ".bin", sparse + ".idx")):
            log(f"reusing corpus in {workdir}")
            return prefix, sparse, have
    except (OSError, ValueError, KeyError):
        pass
    log(f"writing a {total_tokens * 2 / 1e9:.2f} GB corpus and a sparse {sparse_times}x one in {workdir}")
    t0 = time.perf_counter()
    lengths = write_corpus(prefix, total_tokens, seed)
    sparse_tokens = write_sparse_corpus(sparse, lengths, sparse_times)
    info = {"params": want, "tokens": int(lengths.sum()), "documents": len(lengths),
            "doc_len_median": float(np.median(lengths)), "doc_len_mean": float(lengths.mean()),
            "doc_len_p99": float(np.percentile(lengths, 99)),
            "bin_bytes": int(lengths.sum()) * 2, "sparse_tokens": sparse_tokens,
            "sparse_documents": len(lengths) * sparse_times, "sparse_bin_bytes": sparse_tokens * 2,
            "write_seconds": time.perf_counter() - t0}
    with open(stamp_path, "w") as f:
        json.dump(info, f, indent=1)
    return prefix, sparse, info


def job_config(prefix, shards=SHARDS):
    return {"seq_len": SEQ_LEN, "batch_size": LINES, "seed": 1, "logical_shards": shards, "eos_id": EOS,
            "datasets": [{"name": "bench", "path": prefix, "format": "megatron"}]}


# ---------------------------------------------------------------- statistics

def summary(samples):
    s = [float(x) for x in samples]
    return {"median": statistics.median(s), "min": min(s), "max": max(s), "samples": s}


# ---------------------------------------------------------------- daemon

def free_port():
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """`dataloaderd serve` on a socket of its own, with metrics on a free port."""

    def __init__(self, binary, tmp, name):
        self.socket = os.path.join(tmp, f"{name}.sock")
        self.port = free_port()
        self.logf = open(os.path.join(tmp, f"{name}.log"), "w")
        self.binary = binary
        self.proc = subprocess.Popen([binary, "serve", "--socket", self.socket, "--log-level", "warn",
                                      "--metrics-addr", f"127.0.0.1:{self.port}"],
                                     stdout=self.logf, stderr=subprocess.STDOUT)
        for _ in range(300):
            if subprocess.run([binary, "healthcheck", "--socket", self.socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode} before serving")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the daemon did not become healthy")

    def status_kib(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.logf.close()


@contextlib.contextmanager
def daemon(binary, tmp, name):
    d = Daemon(binary, tmp, name)
    try:
        yield d
    finally:
        d.stop()


# ---------------------------------------------------------------- ceilings and Go

GO_LINE = re.compile(r"^(BenchmarkCorpus\w+?)(?:-\d+)?\s+\d+\s+.*?([\d.e+]+) tokens/s")


def go_benchmarks(prefix, benchtime, repeats):
    """The Go ceiling and pipeline benchmarks on the corpus, one core."""
    env = dict(os.environ, DATALOADERD_BENCH_PREFIX=prefix, DATALOADERD_BENCH_SHARDS=str(SHARDS))
    cmd = ["go", "test", "-run", "^$", "-bench", "^BenchmarkCorpus", "-benchtime", benchtime,
           "-count", str(repeats), "-cpu", "1", "./internal/stream/"]
    log("go: " + " ".join(cmd))
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"go test failed:\n{out.stdout}\n{out.stderr}")
    found = {}
    for line in out.stdout.splitlines():
        m = GO_LINE.match(line)
        if m:
            found.setdefault(m.group(1), []).append(float(m.group(2)))
    want = ("BenchmarkCorpusCopyCeiling", "BenchmarkCorpusRank", "BenchmarkCorpusPipeline")
    missing = [w for w in want if w not in found]
    if missing:
        raise RuntimeError(f"go test printed no result for {missing}:\n{out.stdout}")
    return {k: found[k] for k in want}


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


# ---------------------------------------------------------------- client processes

def client_main(spec):
    """One client process: open, take a first batch, say ready, wait for go,
    then either run for `seconds` (rate) or time next() (wait)."""
    from dataloaderd import Loader
    staging = np.empty((LINES, LINE_TOKENS), dtype=np.int32)
    with Loader(spec["config"], dp_rank=spec["rank"], dp_size=spec["size"], socket=spec["socket"],
                transport=spec["transport"], job=spec["job"]) as loader:
        it = iter(loader)
        first = next(it)
        np.copyto(staging, first["tokens"])
        print("ready", flush=True)
        sys.stdin.readline()
        if spec["mode"] == "rate":
            tokens, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < spec["seconds"]:
                tok = next(it)["tokens"]
                np.copyto(staging[:tok.shape[0]], tok)
                tokens += tok.size
            result = {"tokens": tokens, "seconds": time.perf_counter() - t0}
        else:
            time.sleep(spec["head_start"])
            waits = []
            for _ in range(spec["batches"]):
                t0 = time.perf_counter_ns()
                tok = next(it)["tokens"]
                waits.append((time.perf_counter_ns() - t0) / 1e3)
                np.copyto(staging[:tok.shape[0]], tok)
                time.sleep(spec["step_seconds"])
            result = {"p50_us": float(np.percentile(waits, 50)), "p99_us": float(np.percentile(waits, 99))}
    print(json.dumps(result), flush=True)


def run_clients(specs):
    """Starts one process per spec, releases them together once all are
    ready, and returns their results."""
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--client", json.dumps(s)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for s in specs]
    try:
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a client failed to start (exit {p.wait()})")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"a client exited {p.returncode}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def end_to_end(binary, tmp, prefix, clients, transports, seconds, repeats, wait_batches):
    """tokens/s for each (transport, n clients), the wait inside next(), and
    the daemon's peak RSS after it all."""
    rows = {}
    with daemon(binary, tmp, "e2e") as d:
        run = 0
        for transport in transports:
            for n in clients:
                samples = []
                for r in range(repeats):
                    run += 1
                    specs = [{"config": job_config(prefix), "rank": i, "size": n, "socket": d.socket,
                              "transport": transport, "job": f"rate{run}", "mode": "rate",
                              "seconds": seconds} for i in range(n)]
                    res = run_clients(specs)
                    samples.append(sum(x["tokens"] / x["seconds"] for x in res))
                log(f"{transport} x{n}: {statistics.median(samples):,.0f} tokens/s")
                rows[f"e2e_{transport}_{n}"] = samples
            p50, p99 = [], []
            for r in range(repeats):
                run += 1
                spec = {"config": job_config(prefix), "rank": 0, "size": 1, "socket": d.socket,
                        "transport": transport, "job": f"wait{run}", "mode": "wait", "head_start": 1.0,
                        "batches": wait_batches, "step_seconds": 0.005}
                res = run_clients([spec])[0]
                p50.append(res["p50_us"])
                p99.append(res["p99_us"])
            rows[f"wait_{transport}_p50"] = p50
            rows[f"wait_{transport}_p99"] = p99
            log(f"{transport} wait: p50 {statistics.median(p50):.0f} us, p99 {statistics.median(p99):.0f} us")
        rows["rss_e2e"] = [d.status_kib("VmHWM") * 1024]
        rows["anon_e2e"] = [d.status_kib("RssAnon") * 1024]
    return rows


def startup(binary, tmp, prefix, label, repeats, save_repeats):
    """Time to first batch with a fresh daemon, state save time and size, the
    daemon's peak RSS; one fresh daemon per repeat."""
    from dataloaderd import Loader
    ttfb, saves, sizes, daemon_saves, rss, anon = [], [], [], [], [], []
    for r in range(repeats):
        with daemon(binary, tmp, f"start-{label}-{r}") as d:
            t0 = time.perf_counter()
            loader = Loader(job_config(prefix), dp_rank=0, dp_size=1, socket=d.socket, transport="shm",
                            job=f"start{r}")
            with loader:
                it = iter(loader)
                next(it)
                ttfb.append(time.perf_counter() - t0)
                for _ in range(16):
                    next(it)
                for s in range(save_repeats):
                    next(it)
                    folder = os.path.join(tmp, f"ckpt-{label}-{r}-{s}")
                    t1 = time.perf_counter()
                    loader.save(folder)
                    saves.append(time.perf_counter() - t1)
                    files = [os.path.join(dp, f) for dp, _, fs in os.walk(folder) for f in fs]
                    sizes.append(sum(os.path.getsize(f) for f in files))
                    shutil.rmtree(folder)
                m = d.metrics()
                count = m.get("dataloaderd_state_save_seconds_count", 0)
                if count:
                    daemon_saves.append(m["dataloaderd_state_save_seconds_sum"] / count)
                anon.append(d.status_kib("RssAnon") * 1024)
            rss.append(d.status_kib("VmHWM") * 1024)
    out = {f"ttfb_{label}": ttfb, f"rss_{label}": rss, f"anon_{label}": anon}
    if label == "1x":
        out.update({"save_client": saves, "save_daemon": daemon_saves, "state_bytes": sizes})
    return out


# ---------------------------------------------------------------- peers

def peers(peers_python, prefix, mds_dir, seconds, repeats, workers, quick):
    """Runs scripts/bench_peers.py in the peers' environment; {} when absent."""
    if not peers_python or not os.path.exists(peers_python):
        log(f"peers skipped: no environment at {peers_python} (make bench creates it)")
        return {}, {"skipped": f"no peers environment at {peers_python}"}
    cmd = [peers_python, os.path.join(HERE, "bench_peers.py"), "--prefix", prefix, "--mds", mds_dir,
           "--seconds", str(seconds), "--repeats", str(repeats), "--workers", str(workers),
           "--seq-len", str(SEQ_LEN), "--batch", str(LINES)]
    log("peers: " + " ".join(cmd))
    out = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    if out.returncode != 0:
        raise RuntimeError(f"bench_peers.py exited {out.returncode}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return res["rates"], res["info"]


# ---------------------------------------------------------------- table

ROWS = [
    # key, label, unit, ratio basis (a key) or None
    ("go_copy", "Go copy, 1 core (ceiling)", "tokens/s", "go_copy"),
    ("numpy_copy", "numpy copy, 1 core (ceiling)", "tokens/s", "numpy_copy"),
    ("go_rank", "Go pipeline into a buffer, 1 core", "tokens/s", "go_copy"),
    ("go_pipeline", "Go pipeline into an 8-slot ring, 1 core", "tokens/s", "go_copy"),
    ("e2e_shm_1", "client shm, 1 process", "tokens/s", "numpy_copy"),
    ("e2e_shm_2", "client shm, 2 processes (sum)", "tokens/s", "numpy_copy"),
    ("e2e_shm_8", "client shm, 8 processes (sum)", "tokens/s", "numpy_copy"),
    ("e2e_inline_1", "client inline, 1 process", "tokens/s", "numpy_copy"),
    ("e2e_inline_2", "client inline, 2 processes (sum)", "tokens/s", "numpy_copy"),
    ("e2e_inline_8", "client inline, 8 processes (sum)", "tokens/s", "numpy_copy"),
    ("peer_torch", "PyTorch DataLoader + memmap", "tokens/s", "e2e_shm_1"),
    ("peer_stateful", "torchdata StatefulDataLoader + memmap", "tokens/s", "e2e_shm_1"),
    ("peer_streaming", "Mosaic StreamingDataset (MDS)", "tokens/s", "e2e_shm_1"),
    ("wait_shm_p50", "wait in next(), shm, daemon ahead, p50", "us", None),
    ("wait_shm_p99", "wait in next(), shm, daemon ahead, p99", "us", None),
    ("wait_inline_p50", "wait in next(), inline, daemon ahead, p50", "us", None),
    ("wait_inline_p99", "wait in next(), inline, daemon ahead, p99", "us", None),
    ("ttfb_1x", "time to first batch, 1x corpus", "s", None),
    ("ttfb_20x", "time to first batch, 20x sparse corpus", "s", "ttfb_1x"),
    ("save_client", "state save, loader.save(), 1024 shards", "s", None),
    ("save_daemon", "state save, dataloaderd_state_save_seconds", "s", None),
    ("state_bytes", "state size per rank, 1024 shards", "bytes", None),
    ("rss_1x", "daemon peak RSS (VmHWM), 1x, 1 client", "bytes", None),
    ("rss_20x", "daemon peak RSS (VmHWM), 20x, 1 client", "bytes", "rss_1x"),
    ("rss_e2e", "daemon peak RSS (VmHWM), after all e2e runs", "bytes", None),
    ("anon_1x", "daemon anonymous RSS (RssAnon), 1x, 1 client", "bytes", None),
    ("anon_20x", "daemon anonymous RSS (RssAnon), 20x, 1 client", "bytes", None),
    ("anon_e2e", "daemon anonymous RSS (RssAnon), after e2e runs", "bytes", None),
    ("mds_convert", "Mosaic MDS conversion of the corpus (once)", "s", None),
]
PEER_KEYS = ("peer_torch", "peer_stateful", "peer_streaming", "mds_convert")


def build_rows(samples):
    rows = []
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    for key, label, unit, basis in ROWS:
        row = {"key": key, "label": label, "unit": unit}
        if samples.get(key):
            row.update(summary(samples[key]))
            if basis and med.get(basis):
                row["ratio"] = med[key] / med[basis]
                row["ratio_to"] = basis
            if key.startswith("peer_") and med.get("numpy_copy"):
                row["ratio_numpy_copy"] = med[key] / med["numpy_copy"]
        else:
            row.update({"median": None, "min": None, "max": None, "samples": []})
        rows.append(row)
    return rows


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "tokens/s":
        return f"{v / 1e6:,.1f} M"
    if unit == "us":
        return f"{v:,.0f}"
    if unit == "s":
        return f"{v:.4f}" if v < 10 else f"{v:.1f}"
    if unit == "bytes":
        return f"{v / 2**20:,.1f} MiB" if v >= 2**20 else f"{v / 1024:,.1f} KiB"
    return f"{v:g}"


def ratio_text(row):
    if row.get("ratio") is None:
        return ""
    basis = {"go_copy": "Go copy", "numpy_copy": "numpy copy", "e2e_shm_1": "dataloaderd shm x1",
             "ttfb_1x": "1x", "rss_1x": "1x"}[row["ratio_to"]]
    text = f"{row['ratio']:.3f}x {basis}"
    if "ratio_numpy_copy" in row:
        text += f"; {row['ratio_numpy_copy']:.3f}x numpy copy"
    return text


def unit_text(unit):
    return {"tokens/s": "tokens/s", "us": "µs", "s": "s", "bytes": ""}[unit]


def markdown(result):
    lines = ["| measurement | ratio | median | min | max | unit |", "|---|---|---:|---:|---:|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['label']} | {ratio_text(row)} | {fmt(row['median'], row['unit'])} | "
                     f"{fmt(row['min'], row['unit'])} | {fmt(row['max'], row['unit'])} | {unit_text(row['unit'])} |")
    return "\n".join(lines)


def text_table(result):
    out = [f"{'measurement':<46}{'ratio':<42}{'median':>14}{'min':>14}{'max':>14}  unit"]
    for row in result["rows"]:
        out.append(f"{row['label']:<46}{ratio_text(row):<42}{fmt(row['median'], row['unit']):>14}"
                   f"{fmt(row['min'], row['unit']):>14}{fmt(row['max'], row['unit']):>14}  {unit_text(row['unit'])}")
    return "\n".join(out)


def machine(load):
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem, "kernel": platform.release(),
            "python": platform.python_version(), "numpy": np.__version__,
            "go": subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True).stdout.strip(),
            "loadavg_at_start": load, "loadavg_at_end": os.getloadavg()}


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
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
    ap.add_argument("--peers-python", default=os.path.join(REPO, "bench", ".venv", "bin", "python"))
    ap.add_argument("--peer-workers", type=int, default=2)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        client_main(json.loads(args.client))
        return
    if args.quick:
        args.corpus_gb, args.repeats, args.seconds, args.go_benchtime = 0.02, 1, 0.5, "100ms"
        args.sparse_times = 20
    wait_batches = 50 if args.quick else 300
    save_repeats = 2 if args.quick else 5
    clients = [int(c) for c in args.clients.split(",")]
    os.makedirs(args.out, exist_ok=True)
    started, load = time.time(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dataloaderd-bench-") as tmp:
        workdir = args.workdir or (os.path.join(tmp, "corpus") if args.quick
                                   else os.path.join(REPO, "bench", ".corpus"))
        total_tokens = int(args.corpus_gb * 1e9 / 2)
        prefix, sparse, corpus = prepare_corpora(workdir, total_tokens, args.sparse_times, seed=1)
        samples = {}
        go = go_benchmarks(prefix, args.go_benchtime, args.repeats)
        samples["go_copy"] = go["BenchmarkCorpusCopyCeiling"]
        samples["go_rank"] = go["BenchmarkCorpusRank"]
        samples["go_pipeline"] = go["BenchmarkCorpusPipeline"]
        samples["numpy_copy"] = [numpy_copy(min(args.seconds, 2.0)) for _ in range(args.repeats)]
        log(f"copy ceilings: Go {statistics.median(samples['go_copy']):,.0f}, "
            f"numpy {statistics.median(samples['numpy_copy']):,.0f} tokens/s")
        samples.update(end_to_end(args.daemon, tmp, prefix, clients, ("shm", "inline"), args.seconds,
                                  args.repeats, wait_batches))
        samples.update(startup(args.daemon, tmp, prefix, "1x", args.repeats, save_repeats))
        samples.update(startup(args.daemon, tmp, sparse, f"{args.sparse_times}x", args.repeats, 0))
        if args.sparse_times != 20:
            samples["ttfb_20x"] = samples.pop(f"ttfb_{args.sparse_times}x")
            samples["rss_20x"] = samples.pop(f"rss_{args.sparse_times}x")
            samples["anon_20x"] = samples.pop(f"anon_{args.sparse_times}x")
        peer_info = {"skipped": "--no-peers"}
        if not args.no_peers:
            rates, peer_info = peers(args.peers_python, prefix, os.path.join(workdir, "mds"), args.seconds,
                                     args.repeats, args.peer_workers, args.quick)
            samples.update(rates)
    result = {
        "version": 1,
        "mode": "quick" if args.quick else "full",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.executable, REPO) if sys.executable.startswith(REPO)
                             else sys.executable] + sys.argv),
        "seconds": round(time.time() - started, 1),
        "machine": machine(load),
        "workload": {"seq_len": SEQ_LEN, "lines_per_batch": LINES, "tokens_per_batch": BATCH_TOKENS,
                     "logical_shards": SHARDS, "repeats": args.repeats, "run_seconds": args.seconds,
                     "go_benchtime": args.go_benchtime, "clients": clients, "touch": "np.copyto into a staging buffer",
                     "peer_workers": args.peer_workers},
        "corpus": corpus,
        "peers": peer_info,
        "rows": build_rows(samples),
    }
    name = "quick" if args.quick else "bench"
    write_atomic(os.path.join(args.out, name + ".json"), json.dumps(result, indent=1) + "\n")
    md = (f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
          f"{result['machine']['memory_bytes'] / 2**30:.0f} GiB; {result['mode']} run of {result['date']}, "
          f"corpus {corpus['tokens']:,} tokens ({corpus['bin_bytes'] / 1e9:.2f} GB uint16), "
          f"median of {args.repeats}.\n\n" + markdown(result) + "\n")
    write_atomic(os.path.join(args.out, name + ".md"), md)
    print(text_table(result))
    print(f"\nwrote {os.path.join(args.out, name + '.json')} and .md ({result['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
