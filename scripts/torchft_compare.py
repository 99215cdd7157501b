"""Tokens lost and repeated per failure of a torchft replica group:
dataloaderd against torchft's own DistributedSampler, on the same job
(examples/train_torchft.py, two groups, group 1 killed with kill -9 and
restarted the same way in both runs: clients/python/tests_torch/torchft_job.py).

    DATALOADERD_BIN=bin/dataloaderd .venv-torch/bin/python scripts/torchft_compare.py [--kills 2] [--steps 120]

A group's lost tokens are those of the stream it passed (up to the furthest
batch it committed) that it never committed; repeated, those committed more
than once. Figures in docs/rank-restart.md."""

import argparse
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "clients", "python", "tests_torch"),
                os.path.join(HERE, "..", "clients", "python", "tests")]

from rundaemon import Daemon  # noqa: E402
from torchft_job import GROUPS, accounting, job_config, run_job  # noqa: E402


def passed_dataloaderd(daemon, config, g, log):
    from dataloaderd import Loader
    with Loader(config, dp_rank=g, dp_size=GROUPS, socket=daemon.socket, job=f"ref-{g}") as ref:
        stream = [np.asarray(b["tokens"]).copy() for b in ref]
    furthest = max((d for _, d, _ in log), default=0)
    return np.concatenate([s.ravel() for s in stream[:furthest]]) if furthest else np.zeros(0, np.int32)


def passed_sampler(config, g, log):
    from torchft.data import DistributedSampler
    width, bs = config["seq_len"] + 1, config["batch_size"]
    tokens = np.concatenate([np.fromfile(d["path"] + ".bin", dtype=np.int32) for d in config["datasets"]])
    lines = tokens[: len(tokens) // width * width].reshape(-1, width)
    order = list(DistributedSampler(range(len(lines)), replica_rank=g, num_replica_groups=GROUPS, group_rank=0,
                                    num_replicas=1, shuffle=True, seed=config["seed"]))
    batch_of = {order[k] + 1: k for k in range(0, len(order), bs)}  # a batch's data step: its first line + 1
    furthest = max((batch_of[d] for _, d, _ in log), default=-1)
    return lines[order[: furthest + bs]].ravel()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=2)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        from pathlib import Path
        daemon = Daemon(Path(tmp))
        try:
            config = job_config(tmp, args.seed)
            for data in ("dataloaderd", "sampler"):
                run = run_job(tmp, config, daemon.socket, data, args.steps, args.kills, args.seed)
                for g in range(GROUPS):
                    log = run.logs[g]
                    passed = (passed_dataloaderd(daemon, config, g, log) if data == "dataloaderd"
                              else passed_sampler(config, g, log))
                    lost, repeated = accounting([t for _, _, t in log], passed)
                    print(f"{data:12s} group {g}: {len(log)} steps committed, {run.deaths if g == 1 else 0} deaths, "
                          f"tokens lost {lost}, repeated {repeated}; restart to first commit "
                          f"{', '.join(f'{s:.1f} s' for s in run.first_commit_s) if g == 1 else '-'}")
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
