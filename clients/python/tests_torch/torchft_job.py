"""A torchft job of two replica groups (examples/train_torchft.py, one
process each, a lighthouse in this process, gloo on the CPU) in which one
group's process is killed (SIGKILL, mid-step) at random steps and restarted,
healing from the live one; and what each group committed: for test_torchft.py and
scripts/torchft_compare.py."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from corpus import make_corpus
from rundaemon import REPO, free_port

EXAMPLE = os.path.join(REPO, "examples", "train_torchft.py")
GROUPS = 2


def read_log(path: str) -> List[Tuple[int, int, np.ndarray]]:
    """The (trainer step, data step, tokens) a group's processes committed."""
    out: List[Tuple[int, int, np.ndarray]] = []
    if not os.path.exists(path):
        return out
    data = open(path, "rb").read()
    i = 0
    while i + 20 <= len(data):
        step, data_step, n = struct.unpack_from("<QQI", data, i)
        if i + 20 + 4 * n > len(data):
            break  # cut short by the kill
        out.append((step, data_step, np.frombuffer(data, "<i4", n, i + 20).copy()))
        i += 20 + 4 * n
    return out


def job_config(tmp: str, seed: int, sizes: Sequence[Tuple[int, int]] = ((120, 60), (80, 40))) -> Dict[str, Any]:
    """A one-epoch job over a unique-token corpus of make_corpus's sizes."""
    datasets, _ = make_corpus(tmp, seed=seed, sizes=sizes)
    return {"seq_len": 16, "batch_size": 2, "seed": seed, "logical_shards": 8, "eos_id": 0, "epochs": 1,
            "datasets": datasets}


@dataclass
class Run:
    """What a run left: each group's committed batches, in the order its
    processes logged them, and per restarted process the seconds from its
    start to its first committed batch (the heal included)."""

    logs: Dict[int, List[Tuple[int, int, np.ndarray]]]
    deaths: int
    first_commit_s: List[float] = field(default_factory=list)


def run_job(tmp: str, config: Dict[str, Any], socket: str, data: str, steps: int, kills: int, seed: int,
            extra: Sequence[Sequence[str]] = ((), ()), exits: Sequence[int] = (0, 0)) -> Run:
    """Groups 0 and 1 train `steps` steps; group 1's process is killed
    (SIGKILL) `kills` times, each as it takes its k-th batch (k random), and
    started again.
    extra: each group's further arguments; exits: each one's exit status."""
    from torchft._torchft import LighthouseServer

    rng = np.random.default_rng(seed)
    cfg_path = os.path.join(tmp, "job.json")
    with open(cfg_path, "w") as f:
        json.dump(config, f)
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=2000, heartbeat_timeout_ms=5000)
    env = {**os.environ, "TORCHFT_LIGHTHOUSE": lighthouse.address(), "PYTHONUNBUFFERED": "1"}
    ports = [free_port() for _ in range(GROUPS)]
    logs = [os.path.join(tmp, f"{data}-group{g}.log") for g in range(GROUPS)]

    def start(g: int, die_at: int = 0) -> Tuple[subprocess.Popen[bytes], float]:
        cmd = [sys.executable, EXAMPLE, "--config", cfg_path, "--group", str(g), "--groups", str(GROUPS),
               "--steps", str(steps), "--store-port", str(ports[g]), "--socket", socket, "--job", f"ft-{data}",
               "--data", data, "--log", logs[g], "--pause", "0.03", *extra[g]]
        return subprocess.Popen(cmd + (["--die-at", str(die_at)] if die_at else []), env=env), time.monotonic()

    def committed(g: int, more_than: int) -> None:
        """Waits until group g logged more than more_than commits."""
        deadline = time.monotonic() + 120
        while len(read_log(logs[g])) <= more_than:
            if procs[g][0].poll() == 0:
                return  # done
            assert procs[g][0].poll() is None, f"group {g} exited {procs[g][0].returncode}"
            assert time.monotonic() < deadline, f"group {g} did not commit in time"
            time.sleep(0.002)

    # Group 1's processes kill themselves (SIGKILL) as they take their
    # k-th batch, k random: a crash mid-step, before the gradients are
    # reduced. (A kill from outside timed by the log would land in the
    # window between a commit and the next batch's request, which repeats
    # a committed batch: docs/rank-restart.md.)
    dies = [int(rng.integers(3, 9)) for _ in range(kills)]
    procs = [start(0), start(1, dies[0] if dies else 0)]
    try:
        run = Run(logs={}, deaths=0)
        for i in range(len(dies)):
            if procs[1][0].wait(timeout=180) != -9:
                break  # the job ended first
            run.deaths += 1
            before = len(read_log(logs[1]))
            # Group 0 goes on alone (its step with group 1 in it fails, then
            # it commits in a quorum of its own) before group 1 is back.
            committed(0, len(read_log(logs[0])))
            time.sleep(float(rng.uniform(0.0, 0.5)))
            procs[1] = start(1, dies[i + 1] if i + 1 < len(dies) else 0)
            while len(read_log(logs[1])) == before and procs[1][0].poll() is None:
                assert time.monotonic() - procs[1][1] < 120, "the restarted group committed nothing"
                time.sleep(0.002)
            run.first_commit_s.append(time.monotonic() - procs[1][1])
        for g, (p, _) in enumerate(procs):
            assert p.wait(timeout=300) == exits[g], f"group {g} exited {p.returncode}"
        run.logs = {g: read_log(logs[g]) for g in range(GROUPS)}
        return run
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
        lighthouse.shutdown()


def corpus_tokens(config: Dict[str, Any]) -> np.ndarray:
    """Every token of the job's corpus but EOS, sorted."""
    t = np.concatenate([np.fromfile(d["path"] + ".bin", dtype=np.int32) for d in config["datasets"]])
    return np.sort(t[t != 0])


def tokens_of(t: np.ndarray) -> np.ndarray:
    """A batch's corpus tokens (every value in the test corpus is unique; 0 is EOS)."""
    t = t.ravel()
    return t[t != 0]


def accounting(committed: List[np.ndarray], passed: np.ndarray) -> Tuple[int, int]:
    """(tokens lost, tokens repeated) of a group: lost are the tokens of the
    stream it passed (up to the furthest batch it committed) never
    committed; repeated, the ones committed more than once."""
    got = np.concatenate([tokens_of(t) for t in committed]) if committed else np.zeros(0, np.int32)
    uniq, counts = np.unique(got, return_counts=True)
    lost = np.setdiff1d(tokens_of(passed), uniq).size
    return int(lost), int((counts - 1).sum())
