"""Several full runs of the benchmark folded into one view of their spread:
which machine and load each ran on, the headline figures of each run side by
side with their range, and per target whether it is met across the runs.

A target counts as met only when every run that measured it met it; one
good run among bad ones is reported as such, never as met."""
import json
import os

from .report import BASIS, fmt, fmt_loadavg, unit_text
from .targets import targets

# The rows shown side by side (in this order), and the rows whose value is a
# ratio within the run rather than an absolute figure.
HEADLINE = [
    "go_rank", "go_pipeline", "e2e_shm_1", "e2e_shm_int32_1", "e2e_shm_2", "e2e_shm_8", "e2e_inline_1",
    "peer_torch", "peer_stateful", "peer_streaming",
    "wait_shm_p50", "wait_shm_p99", "wait_inline_p50", "wait_inline_p99",
    "cpu_total_paced", "cpu_daemon_paced", "cpu_clients_paced", "interval_paced", "cores_paced",
    "peer_cpu_total_paced", "peer_interval_paced", "peer_cores_paced",
    "cpu_total_full", "peer_cpu_total_full",
    "ttfb_1x", "ttfb_20x", "save_client", "state_bytes", "anon_1x", "anon_20x",
    "tok_go_r50k_base", "tok_go_cl100k_base", "tok_go_o200k_base",
    "e2e_text_shm_1", "prepare_text", "e2e_textgz16_shm_1", "e2e_textgz1_shm_1",
    "go_copy", "numpy_copy",
]


def load_runs(paths):
    """The full runs among the JSON files, oldest first."""
    runs = []
    for p in paths:
        with open(p) as f:
            run = json.load(f)
        if run.get("mode") != "full":
            continue
        run["_path"] = p
        runs.append(run)
    return sorted(runs, key=lambda r: r["date"])


def run_label(i, run):
    """Run i's column heading: its number and its date and time (UTC)."""
    return f"{i + 1}: {run['date'][5:16].replace('T', ' ')}"


def runs_table(runs):
    lines = ["| run | date (UTC) | commit | CPU | cores | load average at start (1/5/15 min) | at end | "
             "repeats | seconds |", "|---|---|---|---|---:|---|---|---:|---:|"]
    for i, run in enumerate(runs):
        m = run["machine"]
        lines.append(f"| {i + 1} | {run['date'].replace('T', ' ')[:19]} | {run.get('commit') or 'not recorded'} | "
                     f"{m['cpu']} | {m['cores']} | {fmt_loadavg(m['loadavg_at_start'])} | "
                     f"{fmt_loadavg(m['loadavg_at_end'])} | {run['workload']['repeats']} | {run['seconds']:.0f} |")
    return "\n".join(lines)


def cell(row):
    """A row's figure in one run: its ratio where it has a basis other than
    itself, else its median in its unit."""
    if row is None or row.get("median") is None:
        return None, "-"
    if row.get("ratio") is not None and row.get("ratio_to") != row["key"]:
        return row["ratio"], f"{row['ratio']:.3f}x"
    return row["median"], fmt(row["median"], row["unit"])


def what(row):
    """The unit column: the basis of a ratio, else the unit."""
    if row.get("ratio_to") and row["ratio_to"] != row["key"]:
        return f"x {BASIS[row['ratio_to']]}"
    return unit_text(row["unit"])


def range_text(values, row):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    if row.get("ratio_to") and row["ratio_to"] != row["key"]:
        return f"{lo:.3f} to {hi:.3f}"
    return f"{fmt(lo, row['unit'])} to {fmt(hi, row['unit'])}"


def figures_table(runs, keys=HEADLINE):
    by_run = [{row["key"]: row for row in run["rows"]} for run in runs]
    labels = {}
    for rows in by_run:
        labels.update({k: r for k, r in rows.items() if r.get("median") is not None})
    head = " | ".join(run_label(i, r) for i, r in enumerate(runs))
    lines = [f"| measurement | {head} | across the runs | |", "|---|" + "---:|" * len(runs) + "---|---|"]
    for key in keys:
        if key not in labels:
            continue
        cells = [cell(rows.get(key)) for rows in by_run]
        ref = labels[key]
        lines.append(f"| {ref['label']} | " + " | ".join(c[1] for c in cells) +
                     f" | {range_text([c[0] for c in cells], ref)} | {what(ref)} |")
    return "\n".join(lines)


def verdict(mets):
    """Met across the runs only if every run that measured it met it."""
    measured = [m for m in mets if m is not None]
    if not measured:
        return "not measured"
    met = sum(1 for m in measured if m)
    if met == len(measured):
        return f"**met** in every run ({met} of {len(measured)})"
    if met == 0:
        return f"**not met** in any run (0 of {len(measured)})"
    return f"**not met**: met in {met} of {len(measured)} runs only"


def targets_table(runs):
    per_run = [targets(run["rows"]) for run in runs]
    head = " | ".join(run_label(i, r) for i, r in enumerate(runs))
    lines = [f"| target | {head} | across the runs |", "|---|" + "---|" * len(runs) + "---|"]
    for j, t in enumerate(per_run[0]):
        mets = [ts[j]["met"] for ts in per_run]
        marks = {True: "met", False: "missed", None: "-"}
        lines.append(f"| {t['target']} | " + " | ".join(marks[m] for m in mets) + f" | {verdict(mets)} |")
    return "\n".join(lines)


def spread_markdown(runs):
    return ("Runs (one line each: the machine and its load when the run started and ended):\n\n" +
            runs_table(runs) + "\n\nFigures, each run's median of its repeats (ratios are within the run):\n\n" +
            figures_table(runs) + "\n\nTargets:\n\n" + targets_table(runs) + "\n")


BEGIN = "<!-- spread: begin (scripts/bench_spread.py writes this part) -->"
END = "<!-- spread: end -->"


def replace_section(doc_path, text):
    """Puts text between the BEGIN and END markers of doc_path."""
    with open(doc_path) as f:
        doc = f.read()
    i, j = doc.find(BEGIN), doc.find(END)
    if i < 0 or j < i:
        raise SystemExit(f"{doc_path}: no {BEGIN!r} ... {END!r} section to fill")
    new = doc[:i + len(BEGIN)] + "\n\n" + text + "\n" + doc[j:]
    tmp = doc_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, doc_path)
