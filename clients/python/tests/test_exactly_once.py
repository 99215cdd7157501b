"""Exactly once end to end: rank processes iterate, save, crash or exit, and
resume on other world sizes; every corpus token is served once per epoch."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from corpus import make_corpus

WORKER = os.path.join(os.path.dirname(__file__), "worker.py")


def phase(daemon, config, job, size, tmp, rng, resume_from=None, save=None, kill=False, to_end=False):
    procs, outs = [], []
    for r in range(size):
        out = os.path.join(tmp, f"{job}-{r}.npy")
        args = {"config": config, "rank": r, "size": size, "socket": daemon.socket, "job": job,
                "resume_from": resume_from, "save": save, "kill": kill, "out": out,
                "steps": None if to_end else int(rng.integers(0, 12))}
        procs.append(subprocess.Popen([sys.executable, WORKER, json.dumps(args)]))
        outs.append(out)
    for p in procs:
        code = p.wait(timeout=120)
        assert code == (-9 if kill else 0), f"worker exited {code}"
    return [np.load(o) for o in outs]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exactly_once_through_crash_and_rescale(daemon, tmp_path, seed):
    rng = np.random.default_rng(seed)
    datasets, ranges = make_corpus(str(tmp_path), seed=seed)
    config = {"seq_len": int(rng.integers(8, 40)), "batch_size": int(rng.integers(1, 4)), "seed": seed,
              "logical_shards": 12, "eos_id": 0, "epochs": 1, "datasets": datasets}
    tmp = str(tmp_path)
    first = os.path.join(tmp, "ckpt1")
    second = os.path.join(tmp, "ckpt2")
    served = []
    # Two ranks save, then die by SIGKILL with batches consumed after the save.
    served += phase(daemon, config, "a", 2, tmp, rng, save=first, kill=True)
    # Three ranks resume from that checkpoint, save and exit.
    served += phase(daemon, config, "b", 3, tmp, rng, resume_from=first, save=second)
    # Four ranks resume and run to the end of the epoch.
    served += phase(daemon, config, "c", 4, tmp, rng, resume_from=second, to_end=True)
    got = np.sort(np.concatenate(served))
    want = np.arange(ranges[0][0], ranges[-1][1], dtype=np.int32)
    missing = np.setdiff1d(want, got)
    assert missing.size == 0, f"{missing.size} tokens never served, e.g. {missing[:10]}"
    values, counts = np.unique(got, return_counts=True)
    assert counts.max() == 1, f"tokens served twice: {values[counts > 1][:10]}"
    assert got.size == want.size
