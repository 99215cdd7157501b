"""Skipped ranges of steps (issue 28, item 2): loader.skip_steps(first, last)
at run time and the config's skip_steps at a resume. The batches of a range
are made and dropped, never yielded; the batch after step first - 1 is batch
last + 1 and keeps its data step; the range is logged in the state, shown by
dataloaderd inspect, and survives a save, a 2 -> 3 rescale, a DCP state dict
and a daemon restart."""

from __future__ import annotations

import signal
import threading

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import Loader
from dataloaderd.errors import ConfigError, StateError
from test_reconnect import Supervised
from test_set_weights import inspect_json


def take(loader, n):
    """(step, tokens) of the next n batches."""
    out = []
    for batch in loader:
        out.append((int(batch["step"]), np.asarray(batch["tokens"]).copy()))
        if len(out) == n:
            break
    return out


def data_tokens(batches):
    toks = np.concatenate([t.ravel() for _, t in batches]) if batches else np.zeros(0, np.int32)
    return toks[toks != 0]  # eos_id 0 separates documents


@pytest.fixture
def unique(tmp_path):
    datasets, ranges = make_corpus(str(tmp_path), seed=3)
    config = {"seq_len": 15, "batch_size": 2, "seed": 4, "logical_shards": 12, "eos_id": 0, "epochs": 1,
              "datasets": datasets}
    return config, np.arange(ranges[0][0], ranges[-1][1], dtype=np.int32)


def test_skip_range_then_rescale(daemon, unique, tmp_path):
    """A world of 2 skips steps 6 to 9 (asked at step 3, batches made ahead
    dropped), saves at step 12 and resumes on 3 ranks to the end: every token
    outside the range exactly once, every token inside it never; inspect
    shows the range, skipped."""
    config, corpus = unique
    ckpt = str(tmp_path / "ckpt")
    served, skipped = [], []
    for r in range(2):
        with Loader(config, socket=daemon.socket, dp_rank=r, dp_size=2, job="ref") as ref:
            skipped.append(data_tokens([b for b in take(ref, 9) if 6 <= b[0] <= 9]))
        with Loader(config, socket=daemon.socket, dp_rank=r, dp_size=2, job="run") as loader:
            got = take(loader, 3)
            loader.skip_steps(6, 9)
            got += take(loader, 5)
            assert [s for s, _ in got] == [1, 2, 3, 4, 5, 10, 11, 12]
            loader.save(ckpt)
            served.append(data_tokens(got))
    shown = inspect_json(ckpt)
    assert shown["skips"] == [{"first": 6, "last": 9, "steps": 4, "status": "skipped"}]
    for r in range(3):
        with Loader(config, socket=daemon.socket, dp_rank=r, dp_size=3, job="resumed", resume_from=ckpt) as loader:
            served.append(data_tokens(take(loader, 1 << 20)))
    got, gone = np.concatenate(served), np.concatenate(skipped)
    assert gone.size > 0 and np.intersect1d(got, gone).size == 0, "a token of the skipped range was served"
    values, counts = np.unique(got, return_counts=True)
    assert counts.max() == 1, f"tokens served twice: {values[counts > 1][:10]}"
    assert np.array_equal(np.sort(np.concatenate([got, gone])), corpus), "tokens lost or not of the corpus"


def test_config_key_at_resume_and_refusals(daemon, config, tmp_path):
    """The config key at a resume after step 10: [3, 5] is before it and
    not logged (a warning, nothing skipped), [9, 13] straddles it (steps 11
    to 13 skipped), [15, 16] is ahead. The batches are the data steps of a
    run that skipped nothing; seek into a range lands after it; a DCP state
    dict carries the ranges, a pending one too, and a config's range is
    added to its log at a load, or refused where it overlaps a logged one;
    bad keys and late skips are refused."""
    with Loader(config, socket=daemon.socket, job="ref") as ref:
        want = dict(take(ref, 20))
    ckpt = str(tmp_path / "ckpt")
    with Loader(config, socket=daemon.socket, job="a") as loader:
        take(loader, 10)
        loader.save(ckpt)
    skipping = {**config, "skip_steps": [[3, 5], [9, 13], [15, 16]]}
    with Loader(skipping, socket=daemon.socket, job="b", resume_from=ckpt) as loader:
        got = take(loader, 3)
        assert [s for s, _ in got] == [14, 17, 18]
        assert all(np.array_equal(t, want[s]) for s, t in got)
        loader.skip_steps(25, 28)  # pending in the state dict
        sd = loader.state_dict()
        with pytest.raises(StateError):
            loader.skip_steps(18, 19)  # step 18 was yielded
    with Loader(config, socket=daemon.socket, job="c") as loader:
        loader.load_state_dict(sd)
        assert take(loader, 1)[0][0] == 19
    with Loader({**config, "skip_steps": [[20, 22]]}, socket=daemon.socket, job="c2") as loader:
        loader.load_state_dict(sd)  # [20, 22] added to the state's log, [25, 28] still pending
        assert [s for s, _ in take(loader, 4)] == [19, 23, 24, 29]
    with Loader({**config, "skip_steps": [[24, 26]]}, socket=daemon.socket, job="c3") as loader:
        loader.load_state_dict(sd)
        with pytest.raises(ConfigError, match=r"skip_steps\[0\] \[24, 26\]: steps 24 to 26 overlaps steps 25 to 28"):
            take(loader, 1)
    with Loader(skipping, socket=daemon.socket, job="d", resume_from=ckpt) as loader:
        loader.seek(12)  # in [11, 13]: the batch after it
        assert take(loader, 1)[0][0] == 14
    for bad in ([[5, 3]], [[3, 6], [6, 8]], [[0, 2]], [3, 4], [["a", 2]]):
        with pytest.raises(ConfigError, match="skip_steps"):
            Loader({**config, "skip_steps": bad}, socket=daemon.socket, job="e")


def test_skip_rides_through_a_daemon_restart(tmp_path):
    """skip_steps(20, 25) asked at step 10, the daemon killed and restarted
    at step 15, before the range: the reopened session skips it, and the run
    serves what one whose daemon never died does. Past the range the loader
    keeps the state a reopen starts from at once (a reopen from before the
    range would move through it again, at most max_skip_steps batches)."""
    datasets, _ = make_corpus(str(tmp_path))
    config = {"seq_len": 31, "batch_size": 3, "seed": 9, "logical_shards": 8, "eos_id": 0, "datasets": datasets}
    supervised = Supervised(tmp_path)
    try:
        def run(job, kill_at=None):
            out = []
            with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job=job) as loader:
                for batch in loader:
                    step = int(batch["step"])
                    out.append((step, np.asarray(batch["tokens"]).copy()))
                    if step == 10:
                        loader.skip_steps(20, 25)
                    if step == 26:  # past the range: the state a reopen starts from is kept at once
                        assert loader._recovery.latest is not None and loader._recovery.latest[0] == 26
                    if step == kill_at:
                        supervised.kill(signal.SIGKILL)
                        supervised.start()
                    if len(out) == 30:
                        break
                assert loader.reconnects == (1 if kill_at else 0)
            return out

        want = run("ref")
        got = run("run", kill_at=15)
    finally:
        supervised.stop()
    assert [s for s, _ in want] == list(range(1, 20)) + list(range(26, 37))
    assert [s for s, _ in got] == [s for s, _ in want]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want))


@pytest.mark.parametrize("fast", [True, False])
def test_group_of_two_consumers(daemon, config, fast):
    """Two consumers of one dp_rank each ask for the same range at step 4,
    the producer having made batches of it: both read 1 to 4, then 9 on,
    the batches of a run that skipped nothing at those steps."""
    with Loader(config, socket=daemon.socket, job="ref") as ref:
        want = dict(take(ref, 14))
    a = Loader(config, socket=daemon.socket, job="tp", consumers=2, slots=3, fast=fast)
    b = Loader(config, socket=daemon.socket, job="tp", consumers=2, slots=3, fast=fast)
    try:
        ia, ib = iter(a), iter(b)
        got = {"a": [], "b": []}
        for i in range(10):
            if i == 4:
                a.skip_steps(5, 8)
                b.skip_steps(5, 8)
            for name, it in (("a", ia), ("b", ib)):
                x = next(it)
                got[name].append((int(x["step"]), np.array(x["tokens"])))
        for name in got:
            assert [s for s, _ in got[name]] == [1, 2, 3, 4, 9, 10, 11, 12, 13, 14], name
            assert all(np.array_equal(t, want[s]) for s, t in got[name]), name
        with pytest.raises(StateError):
            a.skip_steps(12, 20)  # overlaps nothing, but step 14 was yielded
    finally:
        a.close()
        b.close()


def test_give_back_and_far_seek_across_a_range(daemon, config, tmp_path):
    """Batch 10, the first after a range 6 to 9, given back: it comes again,
    and a save meanwhile resumes to it; a seek far past a range (the session
    opened again at the step) and one into a range land where they should."""
    with Loader(config, socket=daemon.socket, job="ref") as ref:
        want = dict(take(ref, 12))
    ckpt = str(tmp_path / "given")
    with Loader(config, socket=daemon.socket, job="g") as loader:
        take(loader, 3)
        loader.skip_steps(6, 9)
        assert [s for s, _ in take(loader, 3)] == [4, 5, 10]
        loader.give_back()
        assert loader.step == 5
        loader.save(ckpt)
        again = take(loader, 1)[0]
        assert again[0] == 10 and np.array_equal(again[1], want[10])
    with Loader(config, socket=daemon.socket, job="g2", resume_from=ckpt) as loader:
        assert take(loader, 1)[0][0] == 10
    with Loader(config, socket=daemon.socket, job="s", slots=2) as loader:
        take(loader, 1)
        loader.skip_steps(30, 39)
        loader.skip_steps(60, 61)
        loader.seek(35)  # far: the session opened again at 29, then the range passed
        assert take(loader, 1)[0][0] == 40
        loader.seek(60)
        assert take(loader, 2)[0][0] == 62


def test_a_group_rides_a_skip_through_a_daemon_restart(tmp_path):
    """A group of two consumers (threads, as processes) each ask for steps
    40 to 49 skipped at step 33, and the daemon dies at step 35: the group
    reopens from the state kept before the latest (step 32, before the
    skip), so each consumer asks the reopened session for the range again;
    both read 1 to 39, then 50 on, the batches of a group whose daemon never
    died."""
    datasets, _ = make_corpus(str(tmp_path))
    config = {"seq_len": 31, "batch_size": 3, "seed": 9, "logical_shards": 8, "eos_id": 0, "datasets": datasets}
    supervised = Supervised(tmp_path)
    try:
        with Loader(config, socket=supervised.socket, job="ref") as ref:
            want = dict(take(ref, 70))
        got, errors = {0: [], 1: []}, []

        def consumer(c):
            try:
                with Loader(config, socket=supervised.socket, job="tp", consumers=2) as loader:
                    for batch in loader:
                        step = int(batch["step"])
                        got[c].append((step, np.asarray(batch["tokens"]).copy()))
                        if step == 33:
                            loader.skip_steps(40, 49)
                        if c == 0 and step == 35:
                            supervised.kill()
                            threading.Timer(0.3, supervised.start).start()
                        if len(got[c]) == 55:
                            break
                    got[c].append(loader.reconnects)
            except Exception as e:  # reported below, with the other thread's
                errors.append(f"consumer {c}: {e!r}")

        threads = [threading.Thread(target=consumer, args=(c,)) for c in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        supervised.stop()
    assert not errors, errors
    for c in (0, 1):
        assert got[c].pop() == 1, c
        assert [s for s, _ in got[c]] == list(range(1, 40)) + list(range(50, 66)), c
        assert all(np.array_equal(t, want[s]) for s, t in got[c]), f"consumer {c}'s batches differ"
