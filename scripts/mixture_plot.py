#!/usr/bin/env python3
"""Realized against target mixture of a job run with a schedule, through the
real daemon: a warm-up mix, a linear ramp and an annealing mix over three
datasets; two ranks save in the middle of the ramp, the daemon is killed,
and three ranks resume to the end.

    python scripts/mixture_plot.py [--png docs/mixture-schedule.png] [--md OUT.md]

Prints a Markdown table of each dataset's target weight at the step, and its
share of the lines served so far against the schedule integrated over the
steps (what the mixing rule follows). With matplotlib importable, --png also
draws it. Needs bin/dataloaderd (make build)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python", "src"))
sys.path.insert(0, os.path.join(REPO, "clients", "python", "tests"))

from corpus import make_corpus  # noqa: E402
from dataloaderd import Loader  # noqa: E402

NAMES = ["web", "code", "books"]
SCHEDULE = [
    {"step": 0, "weights": {"web": 6, "code": 3, "books": 1}},
    {"step": 40, "weights": {"web": 6, "code": 3, "books": 1}},
    {"step": 100, "weights": {"web": 2, "code": 3, "books": 5}, "linear": True},
    {"step": 140, "weights": {"web": 0, "code": 1, "books": 3}},
]
STEPS, SAVE_AT, BATCH = 180, 70, 4


def weights_at(step):
    i = 0
    while i < len(SCHEDULE) and SCHEDULE[i]["step"] <= step:
        i += 1
    if i == 0:
        return np.array([SCHEDULE[0]["weights"][n] for n in NAMES], float)
    a = np.array([SCHEDULE[i - 1]["weights"][n] for n in NAMES], float)
    if i == len(SCHEDULE) or not SCHEDULE[i].get("linear"):
        return a
    b = np.array([SCHEDULE[i]["weights"][n] for n in NAMES], float)
    return a + (b - a) * (step - SCHEDULE[i - 1]["step"]) / (SCHEDULE[i]["step"] - SCHEDULE[i - 1]["step"])


class Daemon:
    def __init__(self, work):
        self.socket = os.path.join(work, f"d{time.monotonic_ns()}.sock")
        self.proc = subprocess.Popen([os.path.join(REPO, "bin", "dataloaderd"), "serve", "--socket", self.socket,
                                      "--log-level", "error"])
        for _ in range(100):
            if os.path.exists(self.socket):
                return
            time.sleep(0.05)
        raise RuntimeError("the daemon did not start")


def run(work):
    datasets, _ = make_corpus(work, sizes=((3000, 60), (3000, 60), (3000, 60)))
    for d, name in zip(datasets, NAMES):
        d["name"] = name
    config = {"seq_len": 63, "batch_size": BATCH, "seed": 3, "logical_shards": 12, "eos_id": 0,
              "datasets": datasets, "schedule": SCHEDULE, "metadata": ["dataset_ids"]}
    lines = np.zeros((STEPS + 1, 3))  # lines served at each step, all ranks
    ranks = np.zeros(STEPS + 1)  # ranks at each step
    folder = os.path.join(work, "ckpt")
    d = Daemon(work)
    for r in range(2):
        with Loader(config, socket=d.socket, dp_rank=r, dp_size=2, job="a") as loader:
            for batch in loader:
                s = batch["step"]
                np.add.at(lines[s], np.asarray(batch["dataset_ids"]), 1)
                ranks[s] += 1
                if s == SAVE_AT:
                    loader.save(folder)
                    break
    d.proc.kill()
    d.proc.wait()
    d = Daemon(work)
    for r in range(3):
        with Loader(config, socket=d.socket, dp_rank=r, dp_size=3, job="b", resume_from=folder) as loader:
            for batch in loader:
                s = batch["step"]
                np.add.at(lines[s], np.asarray(batch["dataset_ids"]), 1)
                ranks[s] += 1
                if s == STEPS:
                    break
    d.proc.terminate()
    d.proc.wait()
    return lines, ranks


def report(lines, ranks):
    target = np.zeros((STEPS + 1, 3))
    for s in range(1, STEPS + 1):
        w = weights_at(s)
        target[s] = ranks[s] * BATCH * w / w.sum()
    got, want = np.cumsum(lines, 0), np.cumsum(target, 0)
    rows = ["| step | ranks | target weights now (web / code / books) | lines so far, served | "
            "lines so far, schedule integrated | largest gap (lines) |", "|---:|---:|---|---|---|---:|"]
    for s in sorted(set(range(10, STEPS + 1, 10)) | {SAVE_AT}):
        w = weights_at(s)
        w = w / w.sum()
        rows.append(f"| {s} | {int(ranks[s])} | {' / '.join(f'{x:.2f}' for x in w)} | "
                    f"{' / '.join(str(int(x)) for x in got[s])} | {' / '.join(f'{x:.1f}' for x in want[s])} | "
                    f"{np.abs(got[s] - want[s]).max():.2f} |")
    header, sep, *body = rows
    body.sort(key=lambda r: int(r.split("|")[1]))
    return "\n".join([header, sep] + body), got, want


def plot(path, got, want):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = np.arange(STEPS + 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for i, name in enumerate(NAMES):
        tw = np.array([weights_at(s)[i] / weights_at(s).sum() for s in steps])
        color = f"C{i}"
        a.plot(steps[1:], tw[1:], color=color, lw=1, label=f"{name}: weight at the step")
        tot, wtot = got.sum(1), want.sum(1)
        share = np.divide(got[:, i], tot, out=np.zeros_like(tot), where=tot > 0)
        wshare = np.divide(want[:, i], wtot, out=np.zeros_like(wtot), where=wtot > 0)
        a.plot(steps[1:], wshare[1:], ":", color=color, lw=2, label=f"{name}: schedule integrated")
        a.plot(steps[1:], share[1:], "--", color=color, lw=1, label=f"{name}: served so far")
        b.plot(steps[1:], (got[:, i] - want[:, i])[1:], color=color, label=name)
    a.axvline(SAVE_AT, color="grey", lw=0.8)
    b.axvline(SAVE_AT, color="grey", lw=0.8)
    a.set(xlabel="step", ylabel="share of lines", title="schedule and realized mixture")
    b.set(xlabel="step", ylabel="lines served - schedule integrated",
          title=f"gap (2 ranks, save at {SAVE_AT}, kill -9, 3 ranks)")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--png", help="draw the plot here (needs matplotlib)")
    ap.add_argument("--md", help="write the table here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        lines, ranks = run(work)
    table, got, want = report(lines, ranks)
    print(table)
    if a.md:
        with open(a.md, "w") as f:
            f.write(table + "\n")
    if a.png:
        plot(a.png, got, want)


if __name__ == "__main__":
    main()
