"""The default job name (dataloaderd/_job.py), and what a collision says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dataloaderd import Loader, SessionExistsError
from dataloaderd._job import default_job

HERE = os.path.dirname(os.path.abspath(__file__))


def test_default_job_order():
    torchrun = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500"}
    assert default_job({}) == "default"
    assert default_job({"DATALOADERD_JOB": "mine", "TORCHELASTIC_RUN_ID": "abc", **torchrun}) == "mine"
    assert default_job({"DATALOADERD_JOB": "", "TORCHELASTIC_RUN_ID": "abc", **torchrun}) == "abc"
    for run_id in ("none", ""):
        job = default_job({"TORCHELASTIC_RUN_ID": run_id, **torchrun})
        assert job.startswith("torchrun-10.1.2.3:29500-"), job
    assert default_job({"TORCHELASTIC_RUN_ID": "none"}) == "default"
    # The launcher is this process's parent (its environment has no
    # LOCAL_RANK): its PID and start time end the name.
    assert default_job(torchrun).split("-")[-1].split(".")[0] == str(os.getppid())


def test_job_argument_first(daemon, config, monkeypatch):
    monkeypatch.setenv("DATALOADERD_JOB", "from-env")
    with Loader(config, socket=daemon.socket, job="given") as ld:
        assert ld.job == "given"
    with Loader(config, socket=daemon.socket) as ld:
        assert ld.job == "from-env"


def test_two_torchrun_jobs_on_one_daemon(daemon, config, tmp_path):
    # Three jobs under plain torchrun (TORCHELASTIC_RUN_ID=none) at once, of
    # two ranks each forming one tensor-parallel group: two on master ports
    # 29500 and 29501, and a third on 29500 under another launcher (as a
    # later job on a freed port would be). The ranks of a job share a session
    # (the same batches), one of them started through a shell; no two jobs
    # share a name.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    launchers = [subprocess.Popen([sys.executable, os.path.join(HERE, "fake_job.py"), "launcher", json.dumps(
        {"config": config, "socket": daemon.socket, "port": port, "barrier": str(barrier), "ranks": 6})],
        stdout=subprocess.PIPE, text=True) for port in (29500, 29501, 29500)]
    jobs = [json.loads(p.communicate(timeout=180)[0]) for p in launchers]
    assert all("error" not in r for reports in jobs for r in reports), jobs
    names = [reports[0]["job"] for reports in jobs]
    for reports in jobs:
        assert reports[0] == reports[1], "the two ranks of one job are not in one session"
    assert len(set(names)) == 3, names
    assert names[0].startswith("torchrun-127.0.0.1:29500-") and names[1].startswith("torchrun-127.0.0.1:29501-")


def test_collision_says_why_and_how(daemon, config):
    with Loader(config, socket=daemon.socket, job="none") as a:
        next(iter(a))
        with pytest.raises(SessionExistsError) as info:
            next(iter(Loader(config, socket=daemon.socket, job="none")))
    msg = str(info.value)
    for want in ("another job on this node uses the same job name", "DATALOADERD_JOB", "job=",
                 "opened the same dp_rank twice"):
        assert want in msg, msg
