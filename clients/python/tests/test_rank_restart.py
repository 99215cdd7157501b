"""A rank restart is not a job restart: kill -9 of one rank's process (its
daemon alive) at random steps while another rank reads, and a replacement
started with the same plain Loader(config): each consumer's batches, over
all its processes, are its uninterrupted stream, the only repeat being the
batch a dead process held unreleased; over the ranks every corpus token is
served exactly once. For shm (zero-copy and copy=True) and inline, and a group
of two consumers of one dp_rank. docs/rank-restart.md; the Go-level tests are
internal/session/keep_test.go."""

import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import Loader, StateError

WORKER = os.path.join(os.path.dirname(__file__), "restart_worker.py")
PAUSE = 0.015  # a "training step" between batches, so kills land mid-run
SLOTS = 8  # the daemon's default ring


def read_batches(path):
    """The (step, tokens) a worker appended to path."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i + 12 <= len(data):
        step, n = struct.unpack_from("<QI", data, i)
        if i + 12 + 4 * n > len(data):
            break  # cut short by the kill
        out.append((step, np.frombuffer(data, "<i4", n, i + 12).copy()))
        i += 12 + 4 * n
    return out


class Consumer:
    """One consumer of one rank: its processes, one after another, each
    started with the same arguments; what each took."""

    def __init__(self, tmp, name, args):
        self.tmp, self.name, self.args = tmp, name, args
        self.outs, self.started, self.proc = [], [], None
        self.meta = os.path.join(tmp, f"{name}.meta")

    def start(self):
        out = os.path.join(self.tmp, f"{self.name}-{len(self.outs)}.bin")
        self.outs.append(out)
        self.started.append(time.time())
        self.proc = subprocess.Popen([sys.executable, WORKER, json.dumps({**self.args, "out": out, "meta": self.meta})])

    def taken(self):
        """Batches the running process appended."""
        return len(read_batches(self.outs[-1]))

    def kill_at(self, steps, timeout=60, kill=True):
        """kill -9 once the running process took `steps` batches (or ended)."""
        deadline = time.monotonic() + timeout
        while self.taken() < steps and self.proc.poll() is None:
            assert time.monotonic() < deadline, f"{self.name}: {steps} batches not taken in {timeout} s"
            time.sleep(0.001)
        if self.proc.poll() is not None or not kill:
            return False
        self.proc.kill()
        assert self.proc.wait(timeout=30) == -9
        return True

    def finish(self):
        assert self.proc.wait(timeout=120) == 0, f"{self.name} exited {self.proc.returncode}"

    def stream(self, again):
        """The consumer's batches over its processes, each step once: a
        process goes on at the step after the last its predecessor took, or
        up to `again` steps before it: the batch it held unreleased when it
        died (the control block's releases are stores in shared memory), and
        with messages (inline) the releases still queued in the dead
        process, which never reached the daemon. Batches given again are the
        same."""
        steps, batches = [], []
        for i, out in enumerate(self.outs):
            got = read_batches(out)
            assert got or i == len(self.outs) - 1 or not steps, f"{self.name} process {i} took nothing"
            if not got:
                continue
            first = got[0][0]
            if steps:
                assert steps[-1] - again < first <= steps[-1] + 1, \
                    f"{self.name} process {i} began at step {first} after step {steps[-1]}"
                while got and got[0][0] <= steps[-1]:
                    s, t = got.pop(0)
                    assert np.array_equal(t, batches[s - 1]), f"{self.name}: step {s} given again differs"
            for s, t in got:
                assert not steps or s == steps[-1] + 1, f"{self.name} process {i}: step {s} after {steps[-1]}"
                steps.append(s)
                batches.append(t)
        return steps, batches

    def first_batch_s(self):
        """Per process: from its start to its first batch (s), from its
        Loader (after the imports) to its first batch, and whether its loader
        said it continued (the first: a fresh start)."""
        with open(self.meta) as f:
            metas = [json.loads(line) for line in f]
        return [(m["t_first"] - t, m["t_first"] - m["t_loader"], m["continued"]) for m, t in zip(metas, self.started)]


def reference(daemon, config, rank, size, transport):
    """Rank's uninterrupted stream, read in this process under another job."""
    with Loader(config, dp_rank=rank, dp_size=size, socket=daemon.socket, job=f"ref-{rank}",
                transport=transport) as loader:
        return [np.asarray(b["tokens"]).ravel()[np.asarray(b["tokens"]).ravel() != 0].copy() for b in loader]


def run_restarts(daemon, tmp, transport, consumers, seed, copy=False):
    """dp_size 2: rank 0 of `consumers` processes, one of them killed three
    times at random steps and replaced; rank 1 reads meanwhile, undisturbed.
    Returns the consumers' streams, the reference streams and the times
    from a replacement's start to its first batch."""
    rng = np.random.default_rng(seed)
    datasets, ranges = make_corpus(str(tmp), seed=seed)
    config = {"seq_len": 16, "batch_size": 2, "seed": seed, "logical_shards": 8, "eos_id": 0, "epochs": 1,
              "datasets": datasets}
    base = {"config": config, "size": 2, "socket": daemon.socket, "job": f"job-{transport}-{consumers}",
            "transport": transport, "pause": PAUSE, "copy": copy}
    group = [Consumer(str(tmp), f"r0c{c}", {**base, "rank": 0, "consumers": consumers}) for c in range(consumers)]
    other = Consumer(str(tmp), "r1", {**base, "rank": 1, "consumers": 1})
    for c in group + [other]:
        c.start()
    for c in group:  # the group whole (its consumers in lockstep, as a trainer's are) before a death
        c.kill_at(1, kill=False)
    victim, at = group[0], 0
    for _ in range(3):
        at += int(rng.integers(2, 10))
        if not victim.kill_at(at):
            break
        victim.start()  # the same plain Loader(config): it goes on
        at = 0
    for c in group + [other]:
        c.finish()
    want = [reference(daemon, config, r, 2, transport) for r in range(2)]
    return group, other, want, ranges


@pytest.mark.parametrize("transport,consumers,copy", [("shm", 1, False), ("inline", 1, False), ("shm", 2, False),
                                                      ("inline", 2, False), ("shm", 1, True)],
                         ids=["shm", "inline", "shm-group", "inline-group", "shm-copy"])
def test_rank_restart_goes_on(daemon, tmp_path, transport, consumers, copy):
    group, other, want, ranges = run_restarts(daemon, tmp_path, transport, consumers,
                                              seed=len(transport) + consumers + copy, copy=copy)
    deaths = len(group[0].outs) - 1
    assert deaths >= 1, "no process was killed mid-run"
    again = 1 if transport == "shm" else SLOTS
    for c, ref in [(c, want[0]) for c in group] + [(other, want[1])]:
        steps, batches = c.stream(again)
        assert steps == list(range(1, len(ref) + 1)), f"{c.name}: steps {steps[:5]}..{steps[-5:]} of {len(ref)}"
        for s, (got, exp) in enumerate(zip(batches, ref), 1):
            assert np.array_equal(got, exp), f"{c.name}: step {s} differs from the uninterrupted stream"
    # Over the ranks (a group's consumers read the same batches), every token once.
    served = np.sort(np.concatenate([np.concatenate(group[0].stream(again)[1]),
                                     np.concatenate(other.stream(again)[1])]))
    corpus = np.arange(ranges[0][0], ranges[-1][1], dtype=np.int32)
    assert np.array_equal(served, corpus), "tokens lost or served twice across the ranks"
    times = group[0].first_batch_s()
    assert [continued for _, _, continued in times] == [False] + [True] * deaths, times
    print(f"\n{transport} consumers={consumers}: process start (Loader) to first batch, s: first "
          f"{times[0][0]:.3f} ({times[0][1]:.3f}); {deaths} replacements "
          f"{', '.join(f'{t:.3f} ({lt:.3f})' for t, lt, _ in times[1:])}")


def test_fresh_and_other_config(daemon, tmp_path, config):
    # A session left by a dead process: fresh=True starts the rank over; an
    # open with another config is refused, naming it; another job's open
    # is its own.
    script = (f"from dataloaderd import Loader\nimport os, signal\n"
              f"l = Loader({config!r}, dp_rank=0, dp_size=1, socket={daemon.socket!r}, job='f')\n"
              "it = iter(l); next(it); next(it); next(it)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == -9
    kw = dict(dp_rank=0, dp_size=1, socket=daemon.socket)
    with pytest.raises(StateError, match="other the job config.*fresh=True"):
        next(iter(Loader({**config, "seed": 6}, job="f", **kw)))
    with Loader(config, job="g", **kw) as other_job:
        assert next(iter(other_job))["step"] == 1 and not other_job.continued
    with Loader(config, job="f", fresh=True, **kw) as fresh:
        assert next(iter(fresh))["step"] == 1 and not fresh.continued
