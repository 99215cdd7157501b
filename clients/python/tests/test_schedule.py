"""A mixture schedule through the real daemon: a warm-up mix, a linear ramp
and a main mix; the lines each dataset gets (dataset_ids) follow the
schedule integrated over the steps within one line a rank, through a save
in the middle of the ramp, a kill -9 of the daemon and a resume on another
world size."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from typing import Any, Dict, List

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import ConfigError, Loader, StateError
from rundaemon import BIN

B = 3
SCHEDULE = [{"step": 0, "weights": {"d0": 1, "d1": 3}},
            {"step": 8, "weights": {"d0": 1, "d1": 3}},
            {"step": 28, "weights": {"d0": 4, "d1": 1}, "linear": True}]


def weights_at(step: int) -> List[float]:
    """The schedule's weights of batch `step` (as the README defines them)."""
    pts = SCHEDULE
    names = ["d0", "d1"]
    i = 0
    while i < len(pts) and pts[i]["step"] <= step:
        i += 1
    if i == 0:
        return [pts[0]["weights"][n] for n in names]
    if i == len(pts) or not pts[i].get("linear"):
        return [pts[i - 1]["weights"][n] for n in names]
    a, b = pts[i - 1], pts[i]
    f = (step - a["step"]) / (b["step"] - a["step"])
    return [a["weights"][n] + (b["weights"][n] - a["weights"][n]) * f for n in names]


def target(first: int, last: int, lines: int) -> np.ndarray:
    """Lines per dataset the schedule gives steps first..last of `lines` lines."""
    out = np.zeros(2)
    for s in range(first, last + 1):
        w = np.array(weights_at(s))
        out += lines * w / w.sum()
    return out


@pytest.fixture
def config(tmp_path) -> Dict[str, Any]:
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 15, "batch_size": B, "seed": 2, "logical_shards": 6, "eos_id": 0, "datasets": datasets,
            "schedule": SCHEDULE, "metadata": ["dataset_ids"]}


def take(sock: str, config, world: int, steps: int, job: str, resume=None, save=None) -> Counter:
    got: Counter = Counter()
    for r in range(world):
        with Loader(config, socket=sock, dp_rank=r, dp_size=world, job=job, resume_from=resume) as loader:
            for i, batch in enumerate(loader):
                got.update(int(d) for d in np.asarray(batch["dataset_ids"]))
                if i + 1 == steps:
                    if save:
                        loader.save(save)
                    break
    return got


def test_schedule_followed_through_a_rescale(daemon_factory, config, tmp_path):
    d = daemon_factory()
    whole = take(d.socket, config, 2, 40, "whole")
    want = target(1, 40, 2 * B)
    assert all(abs(whole[i] - want[i]) <= 2 for i in range(2)), (whole, want)
    # Saved at step 18, in the ramp; the daemon killed; three ranks resume.
    folder = str(tmp_path / "ckpt")
    first = take(d.socket, config, 2, 18, "a", save=folder)
    # dataloaderd inspect reads the checkpoint: step, world, the schedule.
    out = subprocess.run([BIN, "inspect", "--json", folder], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen["step"] == 18 and seen["dp_size"] == 2
    assert [p["step"] for p in seen["mixture"][-1]["schedule"]] == [0, 8, 28]
    assert sum(d["lines"] for d in seen["datasets"]) == 2 * 18 * B
    d.proc.kill()
    d.proc.wait()
    d2 = daemon_factory()
    rest = take(d2.socket, config, 3, 22, "b", resume=folder)
    got = first + rest
    want = target(1, 18, 2 * B) + target(19, 40, 3 * B)
    assert all(abs(got[i] - want[i]) <= 5 for i in range(2)), (got, want)


def test_bad_schedules_are_refused_by_name(daemon, config):
    for edit, match in (
            ([{"step": 0, "weights": {"d0": 1}}], 'dataset "d1" has no weight'),
            ([{"step": 0, "weights": {"d0": 1, "d1": 1, "web": 2}}], 'no dataset is named "web"'),
            ([{"step": 5, "weights": {"d0": 1, "d1": 1}}, {"step": 5, "weights": {"d0": 1, "d1": 2}}],
             "step 5 is not after step 5"),
            ([{"step": 0, "weights": {"d0": 0, "d1": 0}}], "every weight is zero"),
            ([{"step": 0, "weights": {"d0": 1, "d1": 1}, "linear": True}], "linear needs a point before it"),
            ([{"step": 0, "weights": {"d0": "x", "d1": 1}}], "weights must map dataset names to numbers")):
        with pytest.raises(ConfigError, match=match):
            with Loader(dict(config, schedule=edit), socket=daemon.socket, dp_rank=0, dp_size=1) as loader:
                next(iter(loader))


def test_dataset_added_at_resume(daemon, tmp_path):
    # A dataset added after the saved ones starts from fresh cursors; the
    # saved ones keep theirs: every token once through the save and resume.
    from corpus import data_tokens
    datasets, ranges = make_corpus(str(tmp_path), sizes=((40, 30), (30, 20), (20, 25)))
    base = {"seq_len": 15, "batch_size": 2, "seed": 1, "logical_shards": 4, "eos_id": 0, "epochs": 1}
    old = dict(base, datasets=datasets[:2])
    new = dict(base, datasets=datasets)
    served: Counter = Counter()
    folder = str(tmp_path / "ckpt")
    for r in range(2):
        with Loader(old, socket=daemon.socket, dp_rank=r, dp_size=2, job="old") as loader:
            for i, batch in enumerate(loader):
                served.update(data_tokens(batch["tokens"]).tolist())
                if i + 1 == 4:
                    loader.save(folder)
                    break
    for r in range(3):
        with Loader(new, socket=daemon.socket, dp_rank=r, dp_size=3, job="new", resume_from=folder) as loader:
            for batch in loader:
                served.update(data_tokens(batch["tokens"]).tolist())
    want = {t for lo, hi in ranges for t in range(lo, hi)}
    assert set(served) == want and all(n == 1 for n in served.values()), "lost or repeated tokens"
    # Dropping a saved dataset is refused by name.
    with pytest.raises(StateError, match='dataset "d1" is in the saved state but not in the config'):
        with Loader(dict(base, datasets=datasets[:1]), socket=daemon.socket, dp_rank=0, dp_size=1, job="x",
                    resume_from=folder) as loader:
            next(iter(loader))
