"""examples/train_gpt.py under real torchrun, through the wrapper, with DDP
(gloo) and torch.distributed.checkpoint: a job killed with kill -9 resumes
from its last checkpoint on another world size and serves every token of
the epoch exactly once, all ranks ending at the same step; resumed on the
same world size, it computes the losses of a run never stopped."""

import glob
import json
import os
import signal
import subprocess
import time

import pytest
import torch

from sessions import kill_session
from torchrun_job import BIN, REPO, check_exactly_once, finish, kill_after_checkpoint, launch_script, make_job, records


@pytest.fixture
def job(tmp_path):
    return make_job(tmp_path)


def launch(job, name, nproc, resume=False):
    """Starts the example under the wrapper in a process group of its own."""
    return launch_script(job, name, nproc, os.path.join(REPO, "examples", "train_gpt.py"), 5, resume)


def check_inspect(job, name, saved, world):
    """`dataloaderd inspect --json` of the DCP checkpoint of step `saved`
    gives the step and world the Loader saved, and every shard's cursor as
    torch itself reads it from the checkpoint; the lines of the cursors are
    the lines the ranks took up to that step."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from dataloaderd._state import FIELDS

    folder = job["tmp"] / "ckpt" / f"step-{saved}"
    got = json.loads(subprocess.run([BIN, "inspect", "--json", str(folder)], check=True, capture_output=True,
                                    text=True).stdout)
    dcp_to_torch_save(folder, job["tmp"] / "whole.pt")
    sd = torch.load(job["tmp"] / "whole.pt", weights_only=False)["dataloader"]
    assert (got["form"], got["prefix"], got["step"], got["dp_size"]) == \
        ("torch.distributed.checkpoint", "dataloader", saved, world)
    assert json.loads(sd["run"])["step"] == saved
    want = {(int(d), int(s)): dict(zip(FIELDS, t.tolist())) for d, per in sd["shards"].items() for s, t in per.items()}
    assert {(c["dataset_index"], c["shard"]): {f: c[f] for f in FIELDS} for c in got["shards"]} == want
    taken = [r for recs in records(job, name)[world].values() for r in recs if r["step"] <= saved]
    line = got["fingerprint"]["seq_len"] + 1  # a line's tokens, as the records hold them
    assert sum(c["lines"] for c in got["shards"]) == sum(len(r["tokens"]) // line for r in taken)


@pytest.mark.parametrize("old,new", [(2, 3), (4, 2)])
def test_killed_job_resumes_on_another_world_size_exactly_once(job, old, new):
    first = launch(job, "a", old)
    saved = kill_after_checkpoint(job, "a", first, 10 if old == 2 else 5)
    check_inspect(job, "a", saved, old)
    resumed = launch(job, "b", new, resume=True)
    finish(job, "b", resumed)
    check_exactly_once(job, "a", old, "b", new, saved)


def test_resume_on_the_same_world_size_gives_the_same_losses(job):
    whole = launch(job, "u", 2)
    finish(job, "u", whole)
    for f in glob.glob(str(job["tmp"] / "ckpt" / "*")):  # a fresh checkpoint folder for the killed run
        subprocess.run(["rm", "-rf", f], check=True)
    first = launch(job, "k1", 2)
    saved = kill_after_checkpoint(job, "k1", first, 10)
    resumed = launch(job, "k2", 2, resume=True)
    finish(job, "k2", resumed)
    want = {rank: {r["step"]: r["loss"] for r in recs} for rank, recs in records(job, "u")[2].items()}
    got = {rank: {r["step"]: r["loss"] for r in recs} for rank, recs in records(job, "k2")[2].items()}
    for rank in (0, 1):
        assert sorted(got[rank]) == [s for s in sorted(want[rank]) if s > saved]
        diffs = [(s, got[rank][s], want[rank][s]) for s in got[rank] if got[rank][s] != want[rank][s]]
        assert not diffs, f"rank {rank}: losses after the resume differ from the run never stopped: {diffs[:3]}"


def processes_with(marker):
    """PIDs of live processes whose command line holds marker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z":
            found.append(int(entry))
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_wrapper_signalled_mid_training(job, sig):
    """A signal to the wrapper alone (a scheduler's, not the terminal's to the
    whole group): SIGTERM stops torchrun and its ranks before the daemon, so
    no rank reads "daemon unavailable"; SIGKILL of the wrapper takes torchrun,
    the ranks and the daemon with it. Either way, nothing is left: no
    process, no socket, no ring."""
    proc = launch(job, "s", 2)
    deadline = time.monotonic() + 300
    while not any(recs for rs in records(job, "s").values() for recs in rs.values()):
        assert proc.poll() is None and time.monotonic() < deadline, (job["tmp"] / "s.out").read_text()[-3000:]
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    proc.wait(timeout=120)
    tmp = job["tmp"]
    deadline = time.monotonic() + 60
    while processes_with(str(tmp)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(str(tmp)) == [], "processes of the job outlived the wrapper"
    out = (tmp / "s.out").read_text()
    assert "DaemonUnavailable" not in out and "pipeline closed" not in out, out[-3000:]
    assert not os.path.exists(tmp / "s.sock"), "socket left"
    assert os.listdir(tmp / "shm-s") == [], "files left in the shm directory"


def test_wrapper_session_killed_mid_training(job):
    """kill -9 of every process in the wrapper's session, as a scheduler or
    a closed terminal kills a job: torchrun and the daemon die at once, and
    the ranks are in sessions of their own (torchrun's start_new_session).
    Nothing of the job is left within seconds and the SIGKILLed daemon's
    socket is removed by the wrapper's watcher. (These ranks print every
    step into torchrun's pipe and so may die of it on their own; ranks that
    would not are held by test_lifecycle.py's stand-in torchrun.)"""
    proc = launch(job, "x", 2)
    deadline = time.monotonic() + 300
    while not any(recs for rs in records(job, "x").values() for recs in rs.values()):
        assert proc.poll() is None and time.monotonic() < deadline, (job["tmp"] / "x.out").read_text()[-3000:]
        time.sleep(0.05)
    kill_session(proc.pid)
    proc.wait(timeout=10)
    tmp = job["tmp"]
    deadline = time.monotonic() + 10
    while processes_with(str(tmp)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(str(tmp)) == [], "processes of the job outlived the kill of the wrapper's session"
    assert not os.path.exists(tmp / "x.sock"), "socket left"
