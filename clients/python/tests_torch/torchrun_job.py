"""A training script under real torchrun, through the wrapper
(deploy/torchrun-with-dataloaderd.sh), over a corpus of unique tokens: start
it, kill -9 the whole job once a checkpoint is whole, read every rank's
records, and check that every token of the epoch was served exactly once.

The scripts take --config, --vocab, --ckpt, --save-every, --records and
--resume (examples/train_gpt.py's arguments), write per rank
<records>/rank-<r>-of-<W>.jsonl lines of {"step", "padding", "tokens", ...}
and, once a checkpoint at step s is whole, <ckpt>/latest holding "step-<s>"."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

from corpus import make_corpus

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("DATALOADERD_BIN", os.path.join(REPO, "bin", "dataloaderd"))


def make_job(tmp_path):
    """A one-epoch job config over make_corpus's unique tokens in tmp_path."""
    datasets, ranges = make_corpus(str(tmp_path))
    config = {"seq_len": 16, "batch_size": 4, "seed": 3, "logical_shards": 12, "eos_id": 0, "epochs": 1,
              "datasets": datasets}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    tokens = {t for lo, hi in ranges for t in range(lo, hi)}
    return {"config": str(path), "vocab": max(tokens) + 1, "tokens": tokens, "tmp": tmp_path}


def start(job, name, nproc, argv):
    """Starts argv (a script and its arguments) under the wrapper's torchrun
    on nproc ranks, in a process group of its own; output in <name>.out."""
    tmp = job["tmp"]
    for d in (f"log-{name}", f"shm-{name}"):
        (tmp / d).mkdir(exist_ok=True)
    env = dict(os.environ, DATALOADERD_BIN=BIN, DATALOADERD_SOCKET=str(tmp / f"{name}.sock"),
               DATALOADERD_ARGS=f"--shm-dir {tmp / f'shm-{name}'} --log-level warn",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cmd = [os.path.join(REPO, "deploy", "torchrun-with-dataloaderd.sh"), "--standalone", f"--nproc-per-node={nproc}"]
    out = open(tmp / f"{name}.out", "w")
    return subprocess.Popen(cmd + list(argv), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def launch_script(job, name, nproc, script, save_every, resume=False, extra=()):
    """Starts a script taking examples/train_gpt.py's arguments under the
    wrapper on nproc ranks."""
    (job["tmp"] / "ckpt").mkdir(exist_ok=True)
    argv = [script, "--config", job["config"], "--vocab", str(job["vocab"]), "--ckpt", str(job["tmp"] / "ckpt"),
            "--save-every", str(save_every), "--records", str(job["tmp"] / f"log-{name}"), *extra]
    return start(job, name, nproc, argv + (["--resume"] if resume else []))


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


def kill_after_checkpoint(job, name, proc, step, saved_step=None):
    """kill -9 of the whole job once a checkpoint at or after `step` is whole
    and training went on past it; returns the checkpoint's step. saved_step()
    is the step of the last whole checkpoint, 0 for none (default: what
    <ckpt>/latest names)."""
    latest = job["tmp"] / "ckpt" / "latest"
    if saved_step is None:
        def saved_step():
            return int(latest.read_text().split("-")[1]) if latest.exists() else 0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, (job["tmp"] / f"{name}.out").read_text()[-3000:]
        saved = saved_step()
        seen = max((r["step"] for rs in records(job, name).values() for recs in rs.values() for r in recs), default=0)
        if saved >= step and seen > saved:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return saved
        time.sleep(0.05)
    raise AssertionError("no checkpoint in 300 s")


def check_exactly_once(job, killed, old, resumed, new, saved):
    """The steps of launch `killed` (old ranks) up to the checkpoint at
    `saved` and every step of launch `resumed` (new ranks) served every token
    of the epoch exactly once; the resumed ranks started right after the
    checkpoint and all ended at the same step. Returns the resumed records."""
    before = [r for recs in records(job, killed)[old].values() for r in recs if r["step"] <= saved]
    after = records(job, resumed)[new]
    assert sorted(after) == list(range(new)), f"records of ranks {sorted(after)} of {new}"
    served = [t for r in before for t in r["tokens"]] + [t for recs in after.values() for r in recs for t in r["tokens"]]
    data = [t for t in served if t != 0]
    assert len(data) == len(set(data)), "a token was served twice"
    assert set(data) == job["tokens"], f"{len(job['tokens'] - set(data))} tokens of the epoch were never served"
    last = {rank: recs[-1]["step"] for rank, recs in after.items()}
    assert len(set(last.values())) == 1, f"the ranks ended at different steps: {last}"
    assert min(r["step"] for recs in after.values() for r in recs) == saved + 1
    return after
