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
a client does to touch its batch). docs/benchmarks.md explains each row.

Also `--client` (internal): one client process of the end-to-end runs.
"""
import argparse
import contextlib
import datetime
import gettext
import glob
import gzip
import json
import os
import platform
import random
import re
import shutil
import socket as socketlib
import statistics
import subprocess
import sys
import sysconfig
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

    def __init__(self, binary, tmp, name, extra=()):
        self.socket = os.path.join(tmp, f"{name}.sock")
        self.port = free_port()
        self.logf = open(os.path.join(tmp, f"{name}.log"), "w")
        self.binary = binary
        self.proc = subprocess.Popen([binary, "serve", "--socket", self.socket, "--log-level", "warn",
                                      "--metrics-addr", f"127.0.0.1:{self.port}", *extra],
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
def daemon(binary, tmp, name, extra=()):
    d = Daemon(binary, tmp, name, extra)
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
    then either run for `seconds` (rate; or until `max_tokens`, if given) or
    time next() (wait). Also reports the time from Loader() to the first batch."""
    from dataloaderd import Loader
    staging = np.empty((LINES, LINE_TOKENS), dtype=np.int32)
    opened = time.perf_counter()
    with Loader(spec["config"], dp_rank=spec["rank"], dp_size=spec["size"], socket=spec["socket"],
                transport=spec["transport"], job=spec["job"]) as loader:
        it = iter(loader)
        first = next(it)
        first_batch_s = time.perf_counter() - opened
        np.copyto(staging, first["tokens"])
        print("ready", flush=True)
        sys.stdin.readline()
        if spec["mode"] == "rate":
            max_tokens = spec.get("max_tokens") or float("inf")
            tokens, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < spec["seconds"] and tokens < max_tokens:
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
        result["first_batch_s"] = first_batch_s
        print(json.dumps(result), flush=True)
        if spec.get("hold"):  # keep the session open until told (the daemon is sampled meanwhile)
            sys.stdin.readline()


def run_clients(specs, before_close=None):
    """Starts one process per spec, releases them together once all are
    ready, and returns their results. With before_close, the clients keep
    their sessions open after reporting until it has run."""
    if before_close:
        specs = [dict(s, hold=True) for s in specs]
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
        if before_close:
            results = []
            for p in procs:
                line = p.stdout.readline()
                if not line.strip():
                    raise RuntimeError(f"a client exited {p.wait()} before reporting")
                results.append(json.loads(line))
            before_close()
            for p in procs:
                p.stdin.write("close\n")
                p.stdin.flush()
                p.stdin.close()
                if p.wait(timeout=600) != 0:
                    raise RuntimeError(f"a client exited {p.returncode}")
            return results
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


# ---------------------------------------------------------------- tokenizer and text

TOK_ENCODINGS = ("r50k_base", "cl100k_base", "o200k_base")
TEXT_TOKENIZER = "cl100k_base"
TEXT_EOS = 100257  # <|endoftext|> in cl100k_base
TEXT_SHARDS = 64  # the client's default; with a 300 MB corpus the daemon keeps 1 MiB JSONL blocks
TEXT_DOC_MAX = 64 << 10  # longer files are cut at a newline into documents of at most this
# The mix of the generated JSONL corpus, by bytes: source code, manual pages,
# package documentation (copyright notices, changelogs, READMEs) and the
# translated message catalogs of every installed language.
TEXT_KINDS = (("go", 0.35), ("python", 0.20), ("man", 0.20), ("doc", 0.10), ("catalogs", 0.15))
# BenchmarkEncode encodes the documents of these kinds; for the sample of the
# JSONL corpus the kind is only a label.
SAMPLE_KIND = {"go": "go", "python": "python", "man": "man", "doc": "man", "catalogs": "catalogs"}


def split_doc(text, limit=TEXT_DOC_MAX):
    """Cuts text at newlines into pieces of at most about limit characters."""
    start = 0
    while len(text) - start > limit:
        cut = text.rfind("\n", start + limit // 2, start + limit)
        cut = start + limit if cut < 0 else cut + 1
        yield text[start:cut]
        start = cut
    if text[start:].strip():
        yield text[start:]


def read_file(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read(8 << 20)
    with open(path, "rb") as f:
        return f.read(8 << 20)


def read_catalog(path):
    """The translated strings of a gettext .mo catalog, one a line."""
    with open(path, "rb") as f:
        cat = gettext.GNUTranslations(f)._catalog
    return "\n".join(v for k, v in sorted(cat.items(), key=lambda kv: str(kv[0]))
                     if isinstance(v, str) and v).encode("utf-8", "surrogatepass")


def text_sources():
    """{kind: (paths, reader)} of the text on this machine."""
    goroot = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True).stdout.strip()
    stdlib = sysconfig.get_paths()["stdlib"]
    py = [p for p in glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)
          if "site-packages" not in p and "dist-packages" not in p]
    docs = [p for p in glob.glob("/usr/share/doc/**/*", recursive=True)
            if os.path.isfile(p) and os.path.getsize(p) < (4 << 20)]
    return {
        "go": (glob.glob(os.path.join(goroot, "src", "**", "*.go"), recursive=True), read_file),
        "python": (py, read_file),
        "man": (glob.glob("/usr/share/man/**/*.gz", recursive=True), read_file),
        "doc": (docs, read_file),
        "catalogs": (glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo"), read_catalog),
    }


def kind_docs(paths, reader):
    """The documents of one kind: every readable UTF-8 text file, cut to TEXT_DOC_MAX."""
    for p in paths:
        try:
            b = reader(p)
            if not b or b"\x00" in b:
                continue
            t = b.decode("utf-8")
        except Exception:  # unreadable, not UTF-8, not a catalog
            continue
        yield from split_doc(t)


def prepare_text_corpus(workdir, total_bytes, sample_bytes, seed):
    """A JSONL corpus ({"text": ...} a line) of about total_bytes made from the
    text on this machine, and a sample of its documents (about sample_bytes,
    drawn evenly) as files for BenchmarkEncode; reused when the parameters match."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "text.jsonl")
    sample_dir = os.path.join(workdir, "text-sample")
    stamp_path = os.path.join(workdir, "text.json")
    want = {"bytes": total_bytes, "sample_bytes": sample_bytes, "seed": seed, "kinds": TEXT_KINDS,
            "doc_max": TEXT_DOC_MAX, "format": 1}
    try:
        with open(stamp_path) as f:
            have = json.load(f)
        if json.loads(json.dumps(want)) == have["params"] and os.path.exists(path) and \
                os.path.exists(os.path.join(sample_dir, "sample.json")):
            log(f"reusing text corpus {path}")
            return path, sample_dir, have
    except (OSError, ValueError, KeyError):
        pass
    log(f"writing a {total_bytes / 1e6:.0f} MB JSONL text corpus in {workdir}")
    t0 = time.perf_counter()
    sources = text_sources()
    weights = dict(TEXT_KINDS)
    rng = random.Random(seed)
    order = {}
    for kind, _ in TEXT_KINDS:
        paths = sorted(sources[kind][0])
        rng.shuffle(paths)
        order[kind] = paths
    srng = random.Random(seed + 1)
    frac = sample_bytes / total_bytes
    written = {k: 0 for k in weights}
    docs = {k: 0 for k in weights}
    sample = []
    passes, total = 0, 0
    if os.path.exists(sample_dir):
        shutil.rmtree(sample_dir)
    os.makedirs(os.path.join(sample_dir, "docs"))
    with open(path + ".tmp", "wb") as out:
        gens = {}
        while total < total_bytes:
            if not gens:
                passes += 1
                if passes > 50:
                    break
                gens = {k: kind_docs(order[k], sources[k][1]) for k in weights if order[k]}
                if not gens:
                    break
            kind = min(gens, key=lambda k: written[k] / weights[k])
            try:
                doc = next(gens[kind])
            except StopIteration:
                del gens[kind]
                continue
            line = (json.dumps({"text": doc}, ensure_ascii=False) + "\n").encode("utf-8")
            out.write(line)
            written[kind] += len(line)
            docs[kind] += 1
            total += len(line)
            if srng.random() < frac:
                name = f"{len(sample):05d}-{kind}.txt"
                with open(os.path.join(sample_dir, "docs", name), "wb") as f:
                    f.write(doc.encode("utf-8"))
                sample.append({"file": name, "kind": SAMPLE_KIND[kind], "valid": True})
    os.replace(path + ".tmp", path)
    with open(os.path.join(sample_dir, "sample.json"), "w") as f:
        json.dump(sample, f)
    info = {"params": want, "path": os.path.relpath(path, REPO), "bytes": total, "documents": sum(docs.values()),
            "bytes_by_kind": written, "documents_by_kind": docs, "passes_over_sources": passes,
            "sample_documents": len(sample),
            "sample_bytes": sum(os.path.getsize(os.path.join(sample_dir, "docs", d["file"])) for d in sample),
            "write_seconds": time.perf_counter() - t0}
    with open(stamp_path, "w") as f:
        json.dump(info, f, indent=1)
    return path, sample_dir, info


def gzip_text_corpus(jsonl, files):
    """The JSONL corpus cut into `files` gzip files of consecutive lines (level
    6), in a folder beside it; reused while the corpus is unchanged."""
    folder = f"{jsonl}.gz{files}"
    stamp = os.path.join(folder, "stamp.json")
    want = {"source_bytes": os.path.getsize(jsonl), "source_mtime_ns": os.stat(jsonl).st_mtime_ns, "files": files}
    try:
        with open(stamp) as f:
            if json.load(f) == want:
                return folder
    except (OSError, ValueError):
        pass
    log(f"writing {jsonl} as {files} gzip file(s) in {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(jsonl, "rb") as f:
        lines = f.readlines()
    per = -(-len(lines) // files)
    for i in range(files):
        with gzip.open(os.path.join(folder, f"part-{i:03d}.jsonl.gz"), "wb", compresslevel=6) as out:
            out.writelines(lines[i * per:(i + 1) * per])
    with open(stamp, "w") as f:
        json.dump(want, f)
    return folder


def write_text_set(folder, vocab, docs, encodings):
    """A text set BenchmarkEncode reads (manifest.json and docs/ as the
    conformance set has them, without reference ids): docs are (kind, bytes)."""
    os.makedirs(os.path.join(folder, "docs"))
    manifest = {"vocab": os.path.abspath(vocab), "docs": [],
                "tokenizers_run": [{"name": e, "kind": "tiktoken"} for e in encodings]}
    for i, (kind, data) in enumerate(docs):
        name = f"{i:05d}-{kind}.txt"
        with open(os.path.join(folder, "docs", name), "wb") as f:
            f.write(data)
        manifest["docs"].append({"file": name, "kind": kind, "valid": True})
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return folder


def sample_docs(sample_dir):
    with open(os.path.join(sample_dir, "sample.json")) as f:
        sample = json.load(f)
    out = []
    for d in sample:
        with open(os.path.join(sample_dir, "docs", d["file"]), "rb") as f:
            out.append((d["kind"], f.read()))
    return out


def build_tokenize_test(tmp):
    """`go test -c` of ./internal/tokenize once, for BenchmarkEncode."""
    binary = os.path.join(tmp, "tokenize.test")
    out = subprocess.run(["go", "test", "-c", "-o", binary, "./internal/tokenize/"], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"go test -c ./internal/tokenize/ failed:\n{out.stdout}\n{out.stderr}")
    return binary


def tokenizer_per_core(tmp, test_binary, conformance, sample_dir, vocab, repeats, passes, quick):
    """tokens/s per core of tiktoken (encode_ordinary, one thread, in this
    process) and of internal/tokenize (BenchmarkEncode, -cpu 1) on the same
    text, interleaved repeat by repeat: the real-text documents of the
    conformance set that `make test-tokenize` builds (what `make
    bench-tokenize` encodes), else the sample of the JSONL corpus."""
    import tokenizer_bench
    if conformance and os.path.exists(os.path.join(conformance, "manifest.json")):
        _, docs = tokenizer_bench.bench_texts(conformance)
        what = f"the real-text documents of the conformance set ({os.path.relpath(conformance, REPO)})"
        kinds = ["go"] * len(docs)
    else:
        pairs = sample_docs(sample_dir)
        docs, kinds = [d for _, d in pairs], [k for k, _ in pairs]
        what = "the sample of the JSONL text corpus (no conformance set: make test-tokenize builds it)"
    if quick:  # every 4th document: the smoke run stays short
        docs, kinds = docs[::4], kinds[::4]
    folder = write_text_set(os.path.join(tmp, "tokset"), vocab, list(zip(kinds, docs)), TOK_ENCODINGS)
    texts = [d.decode("utf-8") for d in docs]
    refs = {}
    for e in TOK_ENCODINGS:
        encode, ref_what = tokenizer_bench.reference_encoder({"name": e, "kind": "tiktoken"}, vocab)
        encode(texts)  # warm up
        refs[e] = encode
    out = {f"tok_tiktoken_{e}": [] for e in TOK_ENCODINGS}
    out.update({f"tok_go_{e}": [] for e in TOK_ENCODINGS})
    for _ in range(repeats):
        for e in TOK_ENCODINGS:
            t0 = time.perf_counter()
            n = sum(refs[e](texts) for _ in range(passes))
            out[f"tok_tiktoken_{e}"].append(n / (time.perf_counter() - t0))
        go = tokenizer_bench.go_encode_rates(folder, TOK_ENCODINGS, passes, binary=test_binary)
        for e in TOK_ENCODINGS:
            out[f"tok_go_{e}"].append(go[e][0][1])
    for e in TOK_ENCODINGS:
        log(f"tokenizer {e}: Go {statistics.median(out[f'tok_go_{e}']):,.0f}, "
            f"tiktoken {statistics.median(out[f'tok_tiktoken_{e}']):,.0f} tokens/s per core")
    info = {"text": what, "documents": len(docs), "bytes": sum(len(d) for d in docs), "passes_per_sample": passes,
            "reference": ref_what, "go": "BenchmarkEncode (internal/tokenize), -cpu 1, one process"}
    return out, info


def tokenizer_all_cores(tmp, test_binary, sample_dir, vocab, repeats, passes, procs):
    """The tokenizer's own rate on all cores on the text of the JSONL corpus:
    procs copies of BenchmarkEncode (one core each) on the sample at the same
    time; a sample is the sum of their rates."""
    from tokenizer_bench import go_encode_rates
    folder = write_text_set(os.path.join(tmp, "textset"), vocab, sample_docs(sample_dir), [TEXT_TOKENIZER])
    samples = []
    for _ in range(repeats):
        rates = go_encode_rates(folder, [TEXT_TOKENIZER], passes, procs=procs, binary=test_binary)
        samples.append(sum(t for _, t in rates[TEXT_TOKENIZER]))
    log(f"tokenizer {TEXT_TOKENIZER} on {procs} cores: {statistics.median(samples):,.0f} tokens/s")
    return samples


PREPARE_TOKENS = re.compile(r"documents: (\d+), tokens: (\d+), input bytes: (\d+)")
PREPARE_RATE = re.compile(r"time: ([\d.]+) s, ([\d.]+) tokens/s")


def prepare_runs(binary, tmp, jsonl, vocab, repeats):
    """`dataloaderd prepare` of the JSONL corpus with all cores (its default
    --workers), into a fresh folder each time; its own tokens/s."""
    rates, info = [], {}
    for r in range(repeats):
        out_dir = os.path.join(tmp, f"prepared-{r}")
        cmd = [binary, "prepare", "--input", jsonl, "--format", "jsonl", "--tokenizer", TEXT_TOKENIZER,
               "--tokenizer-dir", vocab, "--output", out_dir, "--quiet"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"dataloaderd prepare exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
        m, t = PREPARE_TOKENS.search(out.stdout), PREPARE_RATE.search(out.stdout)
        if not m or not t:
            raise RuntimeError(f"dataloaderd prepare printed no summary:\n{out.stdout}")
        rates.append(float(t.group(2)))
        info = {"documents": int(m.group(1)), "tokens": int(m.group(2)), "input_bytes": int(m.group(3)),
                "output_bytes": sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir)),
                "command": " ".join(os.path.relpath(c, REPO) if os.path.isabs(c) else c for c in cmd)}
        shutil.rmtree(out_dir)
    log(f"prepare: {statistics.median(rates):,.0f} tokens/s ({info['tokens']:,} tokens)")
    return rates, info


def text_config(jsonl):
    return {"seq_len": SEQ_LEN, "batch_size": LINES, "seed": 1, "logical_shards": TEXT_SHARDS, "eos_id": TEXT_EOS,
            "datasets": [{"name": "text", "path": jsonl, "format": "jsonl", "tokenizer": TEXT_TOKENIZER}]}


def on_the_fly(binary, tmp, jsonl, vocab, workers, seconds, max_tokens, repeats, key="text"):
    """One client on shm reading the JSONL corpus (a file or a folder) that a
    fresh daemon (per repeat) tokenizes on the fly with `workers` tokenizing
    workers. A run ends after `seconds` or max_tokens (less than one epoch,
    so no unit is served twice from the token cache)."""
    rates, ttfb, anon, hwm = [], [], [], []
    extra = ["--tokenizer-dir", vocab, "--tokenize-workers", str(workers)]
    for r in range(repeats):
        with daemon(binary, tmp, f"{key}-{r}", extra) as d:
            spec = {"config": text_config(jsonl), "rank": 0, "size": 1, "socket": d.socket, "transport": "shm",
                    "job": f"{key}{r}", "mode": "rate", "seconds": seconds, "max_tokens": max_tokens}


            def sample():
                anon.append(d.status_kib("RssAnon") * 1024)
                hwm.append(d.status_kib("VmHWM") * 1024)

            res = run_clients([spec], before_close=sample)[0]
            rates.append(res["tokens"] / res["seconds"])
            ttfb.append(res["first_batch_s"])
            time.sleep(0.2)  # the session closes with tokenizing workers still busy: the daemon must survive it
            if d.proc.poll() is not None:
                with open(d.logf.name) as f:
                    tail = f.read()[-3000:]
                raise RuntimeError(f"the daemon exited {d.proc.returncode} after an on-the-fly session:\n{tail}")
    log(f"on the fly ({key}): {statistics.median(rates):,.0f} tokens/s, first batch {statistics.median(ttfb):.3f} s")
    if key != "text":
        return {f"e2e_{key}_shm_1": rates, f"ttfb_{key}": ttfb}
    return {"e2e_text_shm_1": rates, "ttfb_text": ttfb, "anon_text": anon, "rss_text": hwm}


def text_rows(args, tmp, workdir):
    """The tokenizer and text rows; ({}, {"skipped": why}) when the rank
    files or tiktoken are missing."""
    vocab = args.vocab
    if args.no_tokenize:
        return {}, {"skipped": "--no-tokenize"}
    missing = [e for e in TOK_ENCODINGS if not os.path.exists(os.path.join(vocab, e + ".tiktoken"))]
    if missing:
        why = f"no rank files for {', '.join(missing)} in {vocab} (make test-tokenize or make bench fetches them)"
        log("tokenizer rows skipped: " + why)
        return {}, {"skipped": why}
    try:
        import tiktoken  # noqa: F401
        import tokenizer_conformance  # noqa: F401  (imports tokenizers too)
    except ImportError as e:
        why = f"the reference tokenizer is not importable ({e}); make bench installs it into .venv"
        log("tokenizer rows skipped: " + why)
        return {}, {"skipped": why}
    workers = os.cpu_count() or 1
    total = int(args.text_mb * 1e6)
    jsonl, sample_dir, corpus = prepare_text_corpus(workdir, total, min(total // 8, 32_000_000), seed=1)
    jsonl = os.path.abspath(jsonl)
    test_binary = build_tokenize_test(tmp)
    samples, tok_info = tokenizer_per_core(tmp, test_binary, args.conformance, sample_dir, vocab, args.repeats,
                                           1 if args.quick else 2, args.quick)
    samples["tok_allcore"] = tokenizer_all_cores(tmp, test_binary, sample_dir, vocab, args.repeats,
                                                 2 if args.quick else 4, workers)
    samples["prepare_text"], prep = prepare_runs(args.daemon, tmp, jsonl, vocab, args.repeats)
    max_tokens = int(0.7 * prep["tokens"])
    samples.update(on_the_fly(args.daemon, tmp, jsonl, vocab, workers, args.text_seconds, max_tokens, args.repeats))
    # The same text as gzip files: 16 of them (a corpus of many files), and
    # one (a file every shard shares, each decompressing it up to its part).
    for files in (16, 1):
        folder = gzip_text_corpus(jsonl, files)
        samples.update(on_the_fly(args.daemon, tmp, folder, vocab, workers, args.text_seconds, max_tokens,
                                  args.repeats, key=f"textgz{files}"))
    info = {"tokenizer_per_core": tok_info,
            "tokenizer_all_cores": {"text": "the sample of the JSONL corpus", "processes": workers,
                                    "encoding": TEXT_TOKENIZER, "passes_per_sample": 2 if args.quick else 4},
            "text_corpus": corpus, "prepare": prep,
            "on_the_fly": {"tokenizer": TEXT_TOKENIZER, "tokenize_workers": workers, "logical_shards": TEXT_SHARDS,
                           "eos_id": TEXT_EOS, "run_seconds": args.text_seconds, "max_tokens_per_run": max_tokens,
                           "transport": "shm", "clients": 1,
                           "vocab": os.path.relpath(os.path.abspath(vocab), REPO)}}
    return samples, info


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
    ("tok_tiktoken_r50k_base", "tokenizer r50k_base, tiktoken, 1 thread", "tokens/s", "tok_tiktoken_r50k_base"),
    ("tok_go_r50k_base", "tokenizer r50k_base, Go internal/tokenize, 1 core", "tokens/s", "tok_tiktoken_r50k_base"),
    ("tok_tiktoken_cl100k_base", "tokenizer cl100k_base, tiktoken, 1 thread", "tokens/s", "tok_tiktoken_cl100k_base"),
    ("tok_go_cl100k_base", "tokenizer cl100k_base, Go internal/tokenize, 1 core", "tokens/s",
     "tok_tiktoken_cl100k_base"),
    ("tok_tiktoken_o200k_base", "tokenizer o200k_base, tiktoken, 1 thread", "tokens/s", "tok_tiktoken_o200k_base"),
    ("tok_go_o200k_base", "tokenizer o200k_base, Go internal/tokenize, 1 core", "tokens/s", "tok_tiktoken_o200k_base"),
    ("tok_allcore", "tokenizer cl100k_base, Go, all cores, JSONL text (ceiling)", "tokens/s", "tok_allcore"),
    ("e2e_text_shm_1", "on the fly, JSONL cl100k_base, client shm, 1 process", "tokens/s", "tok_allcore"),
    ("prepare_text", "dataloaderd prepare, JSONL cl100k_base, all cores", "tokens/s", "tok_allcore"),
    ("e2e_textgz16_shm_1", "on the fly, the JSONL as 16 gzip files, client shm, 1 process", "tokens/s",
     "tok_allcore"),
    ("e2e_textgz1_shm_1", "on the fly, the JSONL as 1 gzip file, client shm, 1 process", "tokens/s", "tok_allcore"),
    ("ttfb_text", "time to first batch, JSONL on the fly", "s", None),
    ("ttfb_textgz16", "time to first batch, 16 gzip files on the fly", "s", "ttfb_text"),
    ("ttfb_textgz1", "time to first batch, 1 gzip file on the fly", "s", "ttfb_text"),
    ("rss_text", "daemon peak RSS (VmHWM), on the fly, session open", "bytes", None),
    ("anon_text", "daemon anonymous RSS (RssAnon), on the fly, session open", "bytes", None),
]
TEXT_KEYS = tuple(k for k, *_ in ROWS if k.startswith(("tok_", "e2e_text", "prepare_text", "ttfb_text")) or k.endswith("_text"))
BASIS = {"go_copy": "Go copy", "numpy_copy": "numpy copy", "e2e_shm_1": "dataloaderd shm x1", "ttfb_1x": "1x",
         "rss_1x": "1x", "tok_allcore": "tokenizer all cores", "ttfb_text": "plain JSONL"}
BASIS.update({f"tok_tiktoken_{e}": "tiktoken" for e in TOK_ENCODINGS})
IBM_TOKENS_PER_WORKER = 90_000  # IBM's published per-worker rate of its data loader
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
    text = f"{row['ratio']:.3f}x {BASIS[row['ratio_to']]}"
    if "ratio_numpy_copy" in row:
        text += f"; {row['ratio_numpy_copy']:.3f}x numpy copy"
    return text


def unit_text(unit):
    return {"tokens/s": "tokens/s", "us": "µs", "s": "s", "bytes": ""}[unit]


def targets(rows):
    """The issue's targets, each with what this run measured and whether it
    is met (None: not measured in this run)."""
    r = {row["key"]: row for row in rows}

    def med(key):
        return r[key]["median"] if key in r else None

    def ratio(key):
        return r[key].get("ratio") if key in r else None

    out = []

    def add(target, measured, met):
        out.append({"target": target, "measured": measured, "met": met})

    rank, ring = ratio("go_rank"), ratio("go_pipeline")
    add("Go pipeline alone >= 0.5x memory copy per core",
        f"{rank:.3f}x Go copy into a buffer; {ring:.3f}x into the 8-slot ring" if rank and ring else "not measured",
        rank >= 0.5 if rank else None)
    e2e = ratio("e2e_shm_1")
    add("end to end to one client on shm >= 0.3x memory copy",
        f"{e2e:.3f}x numpy copy" if e2e else "not measured", e2e >= 0.3 if e2e else None)
    shm = med("e2e_shm_1")
    peers = [(r[k]["label"], r[k]["ratio"]) for k in ("peer_torch", "peer_stateful", "peer_streaming")
             if r.get(k, {}).get("ratio") is not None]
    if shm:
        text = f"{shm / IBM_TOKENS_PER_WORKER:,.0f}x 90,000 tokens/s"
        if peers:
            fastest = max(peers, key=lambda p: p[1])
            text += f"; the fastest peer ({fastest[0]}) at {fastest[1]:.3f}x dataloaderd shm x1"
        else:
            text += "; peers not run"
        met = shm >= 1000 * IBM_TOKENS_PER_WORKER and (all(x < 1 for _, x in peers) if peers else None)
        add(">= 1000x IBM's ~90,000 tokens/s per worker and ahead of every peer in the same run", text,
            met if peers else None)
    else:
        add(">= 1000x IBM's ~90,000 tokens/s per worker and ahead of every peer in the same run", "not measured", None)
    p99, p99i = med("wait_shm_p99"), med("wait_inline_p99")
    add("p99 client wait < 50 µs when the daemon is ahead",
        f"shm {p99:,.0f} µs ({p99 / 50:.1f}x the bound); inline {p99i:,.0f} µs ({p99i / 50:.1f}x)"
        if p99 and p99i else "not measured", p99 < 50 if p99 else None)
    t20 = ratio("ttfb_20x")
    add("time to first batch within 20% at 1x and 20x corpus size",
        f"20x / 1x = {t20:.3f}" if t20 else "not measured", t20 <= 1.2 if t20 else None)
    sc, sd, sb = med("save_client"), med("save_daemon"), med("state_bytes")
    add("state save < 10 ms and state < 64 KiB per rank at 1024 logical shards",
        f"save {sc * 1e3:.1f} ms (client, {sc / 0.010:.2f}x the bound), {sd * 1e3:.1f} ms (daemon); "
        f"state {sb / 1024:.1f} KiB ({sb / 65536:.3f}x the bound)" if sc and sd and sb else "not measured",
        (sc < 0.010 and sd < 0.010 and sb < 65536) if sc and sd and sb else None)
    a1, a20, h1, h20 = med("anon_1x"), med("anon_20x"), med("rss_1x"), med("rss_20x")
    add("daemon RSS not growing with corpus size (20x corpus: RssAnon within 20% of 1x)",
        f"RssAnon 20x / 1x = {a20 / a1:.3f}; VmHWM (with mapped corpus pages) 20x / 1x = {h20 / h1:.3f}"
        if a1 and a20 and h1 and h20 else "not measured", a20 / a1 <= 1.2 if a1 and a20 else None)
    toks = [(e, ratio(f"tok_go_{e}")) for e in TOK_ENCODINGS if ratio(f"tok_go_{e}")]
    add("tokenizer >= 1.0x tiktoken per core",
        ", ".join(f"{e} {x:.2f}x" for e, x in toks) if toks else "not measured",
        all(x >= 1.0 for _, x in toks) if toks else None)
    return out


def met_text(met):
    return {True: "met", False: "missed", None: "not measured"}[met]


def targets_markdown(result):
    lines = ["| target | measured (this run) | |", "|---|---|---|"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {met_text(t['met'])} |")
    return "\n".join(lines)


def markdown(result):
    lines = ["| measurement | ratio | median | min | max | unit |", "|---|---|---:|---:|---:|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['label']} | {ratio_text(row)} | {fmt(row['median'], row['unit'])} | "
                     f"{fmt(row['min'], row['unit'])} | {fmt(row['max'], row['unit'])} | {unit_text(row['unit'])} |")
    return "\n".join(lines)


def text_table(result):
    out = [f"{'measurement':<62}{'ratio':<42}{'median':>14}{'min':>14}{'max':>14}  unit"]
    for row in result["rows"]:
        out.append(f"{row['label']:<62}{ratio_text(row):<42}{fmt(row['median'], row['unit']):>14}"
                   f"{fmt(row['min'], row['unit']):>14}{fmt(row['max'], row['unit']):>14}  {unit_text(row['unit'])}")
    out.append("")
    for t in result["targets"]:
        out.append(f"target: {t['target']}: {t['measured']}: {met_text(t['met'])}")
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


def fmt_load(m):
    return (f"{' / '.join(f'{x:.2f}' for x in m['loadavg_at_start'])} (1/5/15 min) at the start, "
            f"{' / '.join(f'{x:.2f}' for x in m['loadavg_at_end'])} at the end")


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
    args = ap.parse_args()
    if args.client:
        client_main(json.loads(args.client))
        return
    if args.quick:
        args.corpus_gb, args.repeats, args.seconds, args.go_benchtime = 0.02, 1, 0.5, "100ms"
        args.sparse_times = 20
        args.text_mb = min(args.text_mb, 4.0)
        args.text_seconds = args.seconds
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
        text_samples, text_info = text_rows(args, tmp, workdir)
        samples.update(text_samples)
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
        "tokenize": text_info,
        "rows": build_rows(samples),
    }
    result["targets"] = targets(result["rows"])
    name = "quick" if args.quick else "bench"
    write_atomic(os.path.join(args.out, name + ".json"), json.dumps(result, indent=1) + "\n")
    md = (f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
          f"{result['machine']['memory_bytes'] / 2**30:.0f} GiB; {result['mode']} run of {result['date']}, "
          f"corpus {corpus['tokens']:,} tokens ({corpus['bin_bytes'] / 1e9:.2f} GB uint16), "
          f"median of {args.repeats}; load average {fmt_load(result['machine'])}.\n\n" + markdown(result) +
          "\n\n" + targets_markdown(result) + "\n")
    write_atomic(os.path.join(args.out, name + ".md"), md)
    print(text_table(result))
    print(f"\nload average {fmt_load(result['machine'])}")
    print(f"\nwrote {os.path.join(args.out, name + '.json')} and .md ({result['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
