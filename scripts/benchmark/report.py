"""The benchmark's table: its rows (key, label, unit, ratio basis), the
issue's targets with a verdict each, the machine, and the JSON, Markdown
and text renderings of one run."""
import os
import platform
import statistics
import subprocess

from .common import REPO, summary

TOK_ENCODINGS = ("r50k_base", "cl100k_base", "o200k_base")
PACE = "8 ranks, a batch every 100 ms"
FULL = "8 ranks at full speed"

ROWS = [
    # key, label, unit, ratio basis (a key) or None
    ("go_copy", "Go copy, 1 core (ceiling)", "tokens/s", "go_copy"),
    ("numpy_copy", "numpy copy, 1 core (ceiling)", "tokens/s", "numpy_copy"),
    ("go_rank", "Go pipeline into a buffer, 1 core", "tokens/s", "go_copy"),
    ("go_pipeline", "Go pipeline into an 8-slot ring, 1 core", "tokens/s", "go_copy"),
    ("go_guard_ratio", "Go pipeline, fault guard on / off, side by side, 1 core", "x", None),
    ("go_pipeline_meta", "Go pipeline into an 8-slot ring, every metadata field, 1 core", "tokens/s", "go_pipeline"),
    ("e2e_shm_1", "client shm, 1 process", "tokens/s", "numpy_copy"),
    ("e2e_shm_int32_1", "client shm, 1 process, dtype=int32", "tokens/s", "numpy_copy"),
    ("e2e_shm_meta_1", "client shm, 1 process, every metadata field", "tokens/s", "e2e_shm_1"),
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
    ("cpu_daemon_paced", f"CPU per 1e9 tokens, daemon, {PACE}", "cpu", None),
    ("cpu_clients_paced", f"CPU per 1e9 tokens, the 8 clients, {PACE}", "cpu", None),
    ("cpu_total_paced", f"CPU per 1e9 tokens, daemon + clients, {PACE}", "cpu", "cpu_total_paced"),
    ("interval_paced", f"realized time between batches per rank, {PACE}", "s", None),
    ("cores_paced", f"cores busy, daemon + clients, {PACE}", "cores", None),
    ("cpu_daemon_full", f"CPU per 1e9 tokens, daemon, {FULL}", "cpu", None),
    ("cpu_clients_full", f"CPU per 1e9 tokens, the 8 clients, {FULL}", "cpu", None),
    ("cpu_total_full", f"CPU per 1e9 tokens, daemon + clients, {FULL}", "cpu", "cpu_total_full"),
    ("peer_cpu_workers_paced", f"CPU per 1e9 tokens, DataLoader workers, {PACE}", "cpu", None),
    ("peer_cpu_ranks_paced", f"CPU per 1e9 tokens, DataLoader rank processes, {PACE}", "cpu", None),
    ("peer_cpu_total_paced", f"CPU per 1e9 tokens, DataLoader workers + ranks, {PACE}", "cpu", "cpu_total_paced"),
    ("peer_interval_paced", f"realized time between batches per rank, DataLoader, {PACE}", "s", None),
    ("peer_cores_paced", f"cores busy, DataLoader workers + ranks, {PACE}", "cores", None),
    ("peer_cpu_workers_full", f"CPU per 1e9 tokens, DataLoader workers, {FULL}", "cpu", None),
    ("peer_cpu_ranks_full", f"CPU per 1e9 tokens, DataLoader rank processes, {FULL}", "cpu", None),
    ("peer_cpu_total_full", f"CPU per 1e9 tokens, DataLoader workers + ranks, {FULL}", "cpu", "cpu_total_full"),
    ("peer_torch_8", f"PyTorch DataLoader + memmap, {FULL} (sum)", "tokens/s", "e2e_shm_8"),
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
BASIS = {"go_copy": "Go copy", "numpy_copy": "numpy copy", "e2e_shm_1": "dataloaderd shm x1", "ttfb_1x": "1x",
         "rss_1x": "1x", "tok_allcore": "tokenizer all cores", "ttfb_text": "plain JSONL",
         "e2e_shm_8": "dataloaderd shm x8", "cpu_total_paced": "dataloaderd", "cpu_total_full": "dataloaderd",
         "go_pipeline": "Go pipeline, tokens only"}
BASIS.update({f"tok_tiktoken_{e}": "tiktoken" for e in TOK_ENCODINGS})
UNITS = {"tokens/s": "tokens/s", "us": "µs", "s": "s", "bytes": "", "cpu": "CPU-s", "cores": "cores", "x": "x"}


def build_rows(samples):
    """The table's rows from {key: [samples]}: every row of ROWS, empty where
    this run has no samples, with its ratio to its basis (medians)."""
    rows = []
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    for key, label, unit, basis in ROWS:
        row = {"key": key, "label": label, "unit": unit}
        if samples.get(key):
            row.update(summary(samples[key]))
            if basis and med.get(basis):
                row["ratio"] = med[key] / med[basis]
                row["ratio_to"] = basis
            if key in ("peer_torch", "peer_stateful", "peer_streaming") and med.get("numpy_copy"):
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
    if unit in ("us", "cpu"):
        return f"{v:,.0f}" if unit == "us" or v >= 100 else f"{v:,.1f}"
    if unit == "s":
        return f"{v:.4f}" if v < 10 else f"{v:.1f}"
    if unit in ("cores", "x"):
        return f"{v:.3f}"
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
    return UNITS[unit]


def markdown(result):
    lines = ["| measurement | ratio | median | min | max | unit |", "|---|---|---:|---:|---:|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['label']} | {ratio_text(row)} | {fmt(row['median'], row['unit'])} | "
                     f"{fmt(row['min'], row['unit'])} | {fmt(row['max'], row['unit'])} | {unit_text(row['unit'])} |")
    return "\n".join(lines)


def text_table(result):
    out = [f"{'measurement':<80}{'ratio':<42}{'median':>14}{'min':>14}{'max':>14}  unit"]
    for row in result["rows"]:
        out.append(f"{row['label']:<80}{ratio_text(row):<42}{fmt(row['median'], row['unit']):>14}"
                   f"{fmt(row['min'], row['unit']):>14}{fmt(row['max'], row['unit']):>14}  {unit_text(row['unit'])}")
    out.append("")
    for t in result["targets"]:
        out.append(f"target: {t['target']}: {t['measured']}: {met_text(t['met'])}")
    return "\n".join(out)


def met_text(met):
    return {True: "met", False: "missed", None: "not measured"}[met]


def targets_markdown(result):
    lines = ["| target | measured (this run) | |", "|---|---|---|"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {met_text(t['met'])} |")
    return "\n".join(lines)


def git_commit():
    """HEAD's short hash, with "+changes" when the work tree differs from it."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return None
    # The results a run writes, and the Markdown pages, are not a change of
    # the code it measured.
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results", ":!*.md")
    return head + ("+changes" if changed else "")


def machine(load):
    import numpy as np
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
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


def fmt_loadavg(load):
    return " / ".join(f"{x:.2f}" for x in load)


def fmt_load(m):
    return (f"{fmt_loadavg(m['loadavg_at_start'])} (1/5/15 min) at the start, "
            f"{fmt_loadavg(m['loadavg_at_end'])} at the end")


def run_markdown(result):
    """bench.md: the machine and the run in one line, the table, the targets."""
    m, corpus, w = result["machine"], result["corpus"], result["workload"]
    return (f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_bytes'] / 2**30:.0f} GiB; {result['mode']} run of "
            f"{result['date']} at {result.get('commit') or 'an unknown commit'}, corpus {corpus['tokens']:,} tokens "
            f"({corpus['bin_bytes'] / 1e9:.2f} GB uint16), median of {w['repeats']}; load average "
            f"{fmt_load(m)}.\n\n" + markdown(result) + "\n\n" + targets_markdown(result) + "\n")
