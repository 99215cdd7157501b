"""A training script under real torchrun, next to a real daemon (the
wrapper, deploy/torchrun-with-dataloaderd.sh), killed with kill -9 after a
checkpoint and relaunched: the helpers of the torch suite's torchrun tests
(test_train_gpt.py, test_trainer_torchtitan.py). Each rank writes its steps
as JSON lines ({"step", "tokens", ...}) to <records>/rank-<r>-of-<W>.jsonl;
the checkpoint folder's file ``latest`` names the last whole checkpoint,
``step-<s>``."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("DATALOADERD_BIN", os.path.join(REPO, "bin", "dataloaderd"))


def launch_script(tmp, name, nproc, program):
    """Starts program (a script and its arguments) under the wrapper's
    torchrun on nproc ranks, in a process group of its own; its output goes
    to tmp/<name>.out, its records to tmp/log-<name>."""
    for d in ("ckpt", f"log-{name}", f"shm-{name}"):
        (tmp / d).mkdir(exist_ok=True)
    env = dict(os.environ, DATALOADERD_BIN=BIN, DATALOADERD_SOCKET=str(tmp / f"{name}.sock"),
               DATALOADERD_ARGS=f"--shm-dir {tmp / f'shm-{name}'} --log-level warn",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cmd = [os.path.join(REPO, "deploy", "torchrun-with-dataloaderd.sh"), "--standalone", f"--nproc-per-node={nproc}"]
    out = open(tmp / f"{name}.out", "w")
    return subprocess.Popen(cmd + list(program), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


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
