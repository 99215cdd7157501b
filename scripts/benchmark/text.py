"""The tokenizer rows (internal/tokenize next to tiktoken, per core and on
all cores) and the rows of text tokenized on the fly by the daemon, and by
`dataloaderd prepare`, on the JSONL corpus of textcorpus."""
import json
import os
import re
import shutil
import statistics
import subprocess
import time

from .clients import run_clients
from .common import LINES, REPO, SEQ_LEN, log
from .daemon import daemon
from .textcorpus import gzip_text_corpus, prepare_text_corpus

TOK_ENCODINGS = ("r50k_base", "cl100k_base", "o200k_base")
TEXT_TOKENIZER = "cl100k_base"
TEXT_EOS = 100257  # <|endoftext|> in cl100k_base
TEXT_SHARDS = 64  # the client's default; with a 300 MB corpus the daemon keeps 1 MiB JSONL blocks
PREPARE_TOKENS = re.compile(r"documents: (\d+), tokens: (\d+), input bytes: (\d+)")
PREPARE_RATE = re.compile(r"time: ([\d.]+) s, ([\d.]+) tokens/s")


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


def per_core_text(conformance, sample_dir, quick):
    """The documents of the per-core rows: the real-text documents of the
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
    return docs, kinds, what


def tokenizer_per_core(tmp, test_binary, conformance, sample_dir, vocab, repeats, passes, quick):
    """tokens/s per core of tiktoken (encode_ordinary, one thread, in this
    process) and of internal/tokenize (BenchmarkEncode, -cpu 1) on the same
    text, interleaved repeat by repeat."""
    import tokenizer_bench
    docs, kinds, what = per_core_text(conformance, sample_dir, quick)
    folder = write_text_set(os.path.join(tmp, "tokset"), vocab, list(zip(kinds, docs)), TOK_ENCODINGS)
    texts = [d.decode("utf-8") for d in docs]
    refs = {}
    for e in TOK_ENCODINGS:
        encode, ref_what = tokenizer_bench.reference_encoder({"name": e, "kind": "tiktoken"}, vocab)
        encode(texts)  # warm up
        refs[e] = encode
    out = {f"tok_{who}_{e}": [] for who in ("tiktoken", "go") for e in TOK_ENCODINGS}
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
                raise RuntimeError(f"the daemon exited {d.proc.returncode} after an on-the-fly session:\n"
                                   f"{d.log_tail()}")
    log(f"on the fly ({key}): {statistics.median(rates):,.0f} tokens/s, first batch {statistics.median(ttfb):.3f} s")
    if key != "text":
        return {f"e2e_{key}_shm_1": rates, f"ttfb_{key}": ttfb}
    return {"e2e_text_shm_1": rates, "ttfb_text": ttfb, "anon_text": anon, "rss_text": hwm}


def text_skipped(args):
    """Why the tokenizer and text rows cannot run here, or None."""
    if args.no_tokenize:
        return "--no-tokenize"
    missing = [e for e in TOK_ENCODINGS if not os.path.exists(os.path.join(args.vocab, e + ".tiktoken"))]
    if missing:
        return (f"no rank files for {', '.join(missing)} in {args.vocab} "
                "(make test-tokenize or make bench fetches them)")
    try:
        import tiktoken  # noqa: F401
        import tokenizer_conformance  # noqa: F401  (imports tokenizers too)
    except ImportError as e:
        return f"the reference tokenizer is not importable ({e}); make bench installs it into .venv"
    return None


def text_rows(args, tmp, workdir):
    """The tokenizer and text rows; ({}, {"skipped": why}) when the rank
    files or tiktoken are missing."""
    why = text_skipped(args)
    if why:
        if why != "--no-tokenize":
            log("tokenizer rows skipped: " + why)
        return {}, {"skipped": why}
    vocab, workers = args.vocab, os.cpu_count() or 1
    total = int(args.text_mb * 1e6)
    jsonl, sample_dir, corpus = prepare_text_corpus(workdir, total, min(total // 8, 32_000_000), seed=1)
    jsonl = os.path.abspath(jsonl)
    test_binary = build_tokenize_test(tmp)
    samples, tok_info = tokenizer_per_core(tmp, test_binary, args.conformance, sample_dir, vocab, args.repeats,
                                           1 if args.quick else 2, args.quick)
    all_passes = 2 if args.quick else 4
    samples["tok_allcore"] = tokenizer_all_cores(tmp, test_binary, sample_dir, vocab, args.repeats, all_passes,
                                                 workers)
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
                                    "encoding": TEXT_TOKENIZER, "passes_per_sample": all_passes},
            "text_corpus": corpus, "prepare": prep,
            "on_the_fly": {"tokenizer": TEXT_TOKENIZER, "tokenize_workers": workers, "logical_shards": TEXT_SHARDS,
                           "eos_id": TEXT_EOS, "run_seconds": args.text_seconds, "max_tokens_per_run": max_tokens,
                           "transport": "shm", "clients": 1,
                           "vocab": os.path.relpath(os.path.abspath(vocab), REPO)}}
    return samples, info
