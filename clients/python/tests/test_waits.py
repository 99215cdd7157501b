"""Waits you can attribute: a deliberately starved job (two ranks that take
batches as fast as they come, from text the daemon must tokenize with one
worker) shows, for each of its own ranks, the fraction of time it waited and
why (tokenize) in /metrics, logs its stalls, and its real metrics, scraped
once a second, fire the shipped alert DataloaderdRankWaiting under promtool
(deploy/prometheus-alerts.yml), with tokenizing named as the cause."""

import json
import os
import random
import re
import socket as socketlib
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Tuple

from rundaemon import REPO

VOCAB = os.environ.get("DATALOADERD_TOKENIZER_VOCAB", "")
PROMTOOL = os.environ.get("DATALOADERD_PROMTOOL", "")
RULES = os.path.join(REPO, "deploy", "prometheus-alerts.yml")
SCRAPES = 10  # one a second; promtool reads them a minute apart (values x 60)
Series = Dict[Tuple[str, str, str], float]  # (metric, dp_rank, cause) -> value
# A rank: a process of its own (as under torchrun) that takes batches as fast
# as they come, until the stop file appears.
RANK = """
import json, os, sys
from dataloaderd import Loader
a = json.loads(sys.argv[1])
n = 0
with Loader(a["config"], socket=a["socket"], dp_rank=a["rank"], dp_size=2, job="starved") as ld:
    for _ in ld:
        n += 1
        if os.path.exists(a["stop"]):
            break
print(n)
"""


def free_port() -> int:
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_text(path: Path, mib: int) -> None:
    rng = random.Random(7)
    words = ["data", "loader", "token", "shard", "window", "epoch", "rank", "batch", "cursor", "resume"]
    with open(path, "w", encoding="utf-8") as f:
        size = 0
        while size < mib << 20:
            text = " ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(400))
            line = json.dumps({"text": text}) + "\n"
            f.write(line)
            size += len(line)


def scrape(port: int, job: str) -> Series:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: Series = {}
    for line in text.splitlines():
        m = re.match(r'(dataloaderd_rank_(?:wait|late)_seconds_total)\{(.*)\} (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels["training_job"] == job:
            out[(m.group(1), labels["dp_rank"], labels.get("cause", ""))] = float(m.group(3))
    return out


def promtool_test(tmp: Path, scrapes: List[Series], uid: str, firing: List[str]) -> str:
    """A promtool unit test of the shipped rules on the scraped series, a
    scrape a minute: the alert fires for the ranks in firing, naming
    tokenizing as the cause. The summary's figure is the rate promtool's
    Prometheus computes over the last 5 minutes, checked half a minute after
    the last sample so that no sample lies on the window's edge (Prometheus
    2 includes its start, 3 does not): the 4 minutes of samples in it,
    extrapolated to the window, (v[end] - v[end-4]) / 240 s."""
    keys = sorted({k for s in scrapes for k in s})
    series = []
    for name, rank, cause in keys:
        labels = f'instance="node-0",job="dataloaderd",uid="{uid}",training_job="starved",dp_rank="{rank}"'
        if cause:
            labels += f',cause="{cause}"'
        values = " ".join(f"{s.get((name, rank, cause), 0.0) * 60:.9g}" for s in scrapes)
        series.append({"series": f"{name}{{{labels}}}", "values": values})
    end = len(scrapes) - 1
    alerts = []
    for rank in firing:
        key = ("dataloaderd_rank_wait_seconds_total", rank, "")
        fraction = (scrapes[end][key] - scrapes[end - 4][key]) * 60 / 240
        alerts.append({
            "exp_labels": {"severity": "warning", "instance": "node-0", "job": "dataloaderd", "uid": uid,
                           "training_job": "starved", "dp_rank": rank},
            "exp_annotations": {
                "summary": f"job starved rank {rank} waits for data {fraction * 100:.4g}% of the time",
                "description": "mostly tokenize on node-0: see the causes in dataloaderd_rank_late_seconds_total "
                               "(docs/metrics.md, \"Which rank waited, and why\")."},
        })
    test = {"rule_files": [str(RULES)], "evaluation_interval": "30s", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [{"eval_time": f"{end}m30s", "alertname": "DataloaderdRankWaiting", "exp_alerts": alerts}],
    }]}
    path = tmp / "starved_test.yml"
    path.write_text(json.dumps(test, indent=1))  # JSON is YAML
    r = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True)
    return r.stdout + r.stderr if r.returncode else ""


def test_a_starved_job_shows_its_waits_and_cause_and_fires_the_alert(daemon_factory, tmp_path):
    assert os.path.exists(os.path.join(VOCAB, "r50k_base.tiktoken")), "DATALOADERD_TOKENIZER_VOCAB (make test sets it)"
    assert PROMTOOL and os.access(PROMTOOL, os.X_OK), "DATALOADERD_PROMTOOL (make test sets it) must name promtool"
    write_text(tmp_path / "a.jsonl", 24)
    port = free_port()
    # One tokenizing worker and a cache smaller than the corpus: every
    # epoch is tokenized again, slower than the ranks read.
    d = daemon_factory("--tokenizer-dir", VOCAB, "--metrics-addr", f"127.0.0.1:{port}", "--tokenize-workers", "1",
                       "--token-cache-mb", "16", "--stall-log", "1ms")
    cfg = {"seq_len": 1023, "batch_size": 8, "seed": 3, "logical_shards": 8, "eos_id": 50256,
           "datasets": [{"name": "a", "path": str(tmp_path / "a.jsonl"), "format": "jsonl", "tokenizer": "r50k_base"}]}
    stop = tmp_path / "stop"
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, json.dumps(
        {"config": cfg, "socket": d.socket, "rank": r, "stop": str(stop)})], stdout=subprocess.PIPE, text=True)
        for r in (0, 1)]
    scrapes: List[Series] = []
    try:
        deadline = time.monotonic() + 60
        while len(scrape(port, "starved")) < 2 * 7 and all(p.poll() is None for p in ranks) and time.monotonic() < deadline:
            time.sleep(0.05)  # both ranks' series are up
        start = time.monotonic()
        for i in range(SCRAPES):
            time.sleep(max(0.0, start + i - time.monotonic()))
            scrapes.append(scrape(port, "starved"))
    finally:
        stop.touch()
        taken = [p.communicate(timeout=60)[0] for p in ranks]
    assert all(p.returncode == 0 for p in ranks), taken
    uid = str(os.getuid())
    last = scrapes[-1]
    for r in ("0", "1"):
        # The rank's own wait: most of the time (it does nothing else).
        wait = last[("dataloaderd_rank_wait_seconds_total", r, "")] - scrapes[0][("dataloaderd_rank_wait_seconds_total", r, "")]
        assert wait > 0.5 * (SCRAPES - 1), f"rank {r} waited {wait:.2f} s of {SCRAPES - 1} s"
        late = {c: v for (n, rr, c), v in last.items() if n == "dataloaderd_rank_late_seconds_total" and rr == r}
        # Of the daemon's causes, tokenizing, by far ("other": the part of
        # the waits longer than the batches took to make, which grows with
        # the machine's load: wake-ups, the daemon's notice of releases).
        daemons = {c: v for c, v in late.items() if c != "other"}
        assert max(daemons, key=lambda c: daemons[c]) == "tokenize", late
        assert daemons["tokenize"] > 10 * (sum(daemons.values()) - daemons["tokenize"]), late
        assert abs(sum(late.values()) - last[("dataloaderd_rank_wait_seconds_total", r, "")]) < 1e-6, late
    logs = d.logs()
    assert '"msg":"a consumer waited for its batch (stall)"' in logs and '"cause":"tokenize"' in logs, logs[-2000:]
    failed = promtool_test(tmp_path, scrapes, uid, ["0", "1"])
    assert not failed, failed
    # The same series with one rank's wait held at its first value: the
    # alert fires for the other rank only (promtool fails on any mismatch).
    flat = [{**s, ("dataloaderd_rank_wait_seconds_total", "1", ""): scrapes[0][("dataloaderd_rank_wait_seconds_total", "1", "")]}
            for s in scrapes]
    failed = promtool_test(tmp_path, flat, uid, ["0"])
    assert not failed, failed
    assert promtool_test(tmp_path, flat, uid, ["0", "1"]), "promtool passed an alert that should not fire"
