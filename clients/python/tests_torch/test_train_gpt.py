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
import sys
import time

import pytest

from corpus import make_corpus
from sessions import kill_session

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("DATALOADERD_BIN", os.path.join(REPO, "bin", "dataloaderd"))


@pytest.fixture
def job(tmp_path):
    datasets, ranges = make_corpus(str(tmp_path))
    config = {"seq_len": 16, "batch_size": 4, "seed": 3, "logical_shards": 12, "eos_id": 0, "epochs": 1,
              "datasets": datasets}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    tokens = {t for lo, hi in ranges for t in range(lo, hi)}
    return {"config": str(path), "vocab": max(tokens) + 1, "tokens": tokens, "tmp": tmp_path}


def launch(job, name, nproc, resume=False):
    """Starts the example under the wrapper in a process group of its own."""
    tmp = job["tmp"]
    for d in ("ckpt", f"log-{name}", f"shm-{name}"):
        (tmp / d).mkdir(exist_ok=True)
    env = dict(os.environ, DATALOADERD_BIN=BIN, DATALOADERD_SOCKET=str(tmp / f"{name}.sock"),
               DATALOADERD_ARGS=f"--shm-dir {tmp / f'shm-{name}'} --log-level warn",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cmd = [os.path.join(REPO, "deploy", "torchrun-with-dataloaderd.sh"), "--standalone", f"--nproc-per-node={nproc}",
           os.path.join(REPO, "examples", "train_gpt.py"), "--config", job["config"], "--vocab", str(job["vocab"]),
           "--ckpt", str(tmp / "ckpt"), "--save-every", "5", "--records", str(tmp / f"log-{name}")]
    out = open(tmp / f"{name}.out", "w")
    return subprocess.Popen(cmd + (["--resume"] if resume else []), env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def records(job, name):
    """Every rank's log lines of one launch: {world: {rank: [record, ...]}}."""
    out = {}
    for path in glob.glob(str(job["tmp"] / f"log-{name}" / "rank-*-of-*.jsonl")):
        rank, world = (int(x) for x in os.path.basename(path)[5:-6].split("-of-"))
        with open(path) as f:
            out.setdefault(world, {})[rank] = [json.loads(line) for line in f]
    return out


def finish(job, name, proc, timeout=300):
    code = proc.wait(timeout=timeout)
    assert code == 0, (job["tmp"] / f"{name}.out").read_text()[-3000:]


def kill_after_checkpoint(job, name, proc, step):
    """kill -9 of the whole job once a checkpoint at or after `step` is whole
    and training went on past it; returns the checkpoint's step."""
    latest = job["tmp"] / "ckpt" / "latest"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, (job["tmp"] / f"{name}.out").read_text()[-3000:]
        saved = int(latest.read_text().split("-")[1]) if latest.exists() else 0
        seen = max((r["step"] for rs in records(job, name).values() for recs in rs.values() for r in recs), default=0)
        if saved >= step and seen > saved:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return saved
        time.sleep(0.05)
    raise AssertionError("no checkpoint in 300 s")


@pytest.mark.parametrize("old,new", [(2, 3), (4, 2)])
def test_killed_job_resumes_on_another_world_size_exactly_once(job, old, new):
    first = launch(job, "a", old)
    saved = kill_after_checkpoint(job, "a", first, 10 if old == 2 else 5)
    resumed = launch(job, "b", new, resume=True)
    finish(job, "b", resumed)
    before = [r for recs in records(job, "a")[old].values() for r in recs if r["step"] <= saved]
    after = records(job, "b")[new]
    served = [t for r in before for t in r["tokens"]] + [t for recs in after.values() for r in recs for t in r["tokens"]]
    data = [t for t in served if t != 0]
    assert len(data) == len(set(data)), "a token was served twice"
    assert set(data) == job["tokens"], f"{len(job['tokens'] - set(data))} tokens of the epoch were never served"
    last = {rank: recs[-1]["step"] for rank, recs in after.items()}
    assert len(set(last.values())) == 1, f"the ranks ended at different steps: {last}"
    assert min(r["step"] for recs in after.values() for r in recs) == saved + 1


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
