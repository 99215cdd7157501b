"""Exactly once end to end: rank processes iterate, save, one dies by SIGKILL,
and the run resumes on another world size (and other weights) to the end of the epoch; every corpus
token is served exactly once, counting what each process served up to its save."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from corpus import make_corpus

WORKER = os.path.join(os.path.dirname(__file__), "worker.py")


def phase(daemon, config, job, size, tmp, rng, resume_from=None, save=None):
    """Runs `size` rank processes. With `save`, each takes a random number of
    batches, saves, takes a few more, and one random rank is then SIGKILLed;
    without, each runs to the end. Returns what each served up to its save."""
    victim = int(rng.integers(0, size)) if save else -1
    procs, outs = [], []
    for r in range(size):
        out = os.path.join(tmp, f"{job}-{r}.npz")
        args = {"config": config, "rank": r, "size": size, "socket": daemon.socket, "job": job,
                "resume_from": resume_from, "save": save, "out": out, "kill": r == victim,
                "steps": int(rng.integers(0, 12)) if save else None,
                "after": int(rng.integers(1, 4)) if save else 0}
        procs.append(subprocess.Popen([sys.executable, WORKER, json.dumps(args)]))
        outs.append(out)
    for r, p in enumerate(procs):
        code = p.wait(timeout=120)
        assert code == (-9 if r == victim else 0), f"{job} rank {r} exited {code}"
    served = []
    for r, out in enumerate(outs):
        with np.load(out) as f:
            steps, start, saved = list(f["steps"]), int(f["start"]), int(f["saved"])
            served.append(f["tokens"])
        assert steps == list(range(start + 1, start + 1 + len(steps))), f"{job} rank {r}: steps {steps}"
        if save:
            assert saved == (steps[-1] if steps else start), f"{job} rank {r} saved step {saved}, served {steps}"
    return served


@pytest.mark.parametrize("seed,sizes", [(1, (2, 3)), (2, (2, 3)), (3, (2, 3, 4))])
def test_exactly_once_through_crash_and_rescale(daemon, tmp_path, seed, sizes):
    rng = np.random.default_rng(seed)
    datasets, ranges = make_corpus(str(tmp_path), seed=seed)
    config = {"seq_len": int(rng.integers(8, 40)), "batch_size": int(rng.integers(1, 4)), "seed": seed,
              "logical_shards": 12, "eos_id": 0, "epochs": 1, "shuffle_window": int(rng.integers(0, 5)),
              "datasets": datasets}
    tmp = str(tmp_path)
    served, resume = [], None
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        save = None if last else os.path.join(tmp, f"ckpt{i}")
        # Each resume may change the weights: a change of mixture, never of data.
        config = {**config, "datasets": [{**d, "weight": float(rng.integers(1, 4))} for d in config["datasets"]]}
        served += phase(daemon, config, f"p{i}", size, tmp, rng, resume_from=resume, save=save)
        resume = save
    got = np.sort(np.concatenate(served))
    want = np.arange(ranges[0][0], ranges[-1][1], dtype=np.int32)
    missing = np.setdiff1d(want, got)
    assert missing.size == 0, f"{missing.size} tokens never served, e.g. {missing[:10]}"
    values, counts = np.unique(got, return_counts=True)
    assert counts.max() == 1, f"tokens served more than once: {values[counts > 1][:10]}"
    assert got.size == want.size, "tokens served that are not in the corpus"
