"""Data step and trainer step (docs/rank-restart.md): a batch given back
(a step the trainer did not commit) is yielded again, and nothing else
changes; seek(step) moves forward to batch `step`, exactly, by reading the
batches between or by reopening the session at the step. Every case is held
to the rank's uninterrupted stream, read under another job."""

import os
import subprocess
import time
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from dataloaderd import Loader, StateError

HERE = os.path.dirname(__file__)


@pytest.fixture
def config(config):
    return {**config, "epochs": 1}  # one epoch: streams end


def tokens_of(batch):
    return np.asarray(batch["tokens"]).copy()


def reference(daemon, config, rank=0, size=1, job="ref"):
    with Loader(config, dp_rank=rank, dp_size=size, socket=daemon.socket, job=job) as loader:
        return [tokens_of(b) for b in loader]


@pytest.mark.parametrize("transport,copy", [("shm", False), ("shm", True), ("inline", False)],
                         ids=["shm", "shm-copy", "inline"])
def test_give_back_yields_again(daemon, config, transport, copy):
    # Give back at random steps, twice in a row at one of them: the stream
    # is the uninterrupted one with exactly those batches repeated.
    want = reference(daemon, config)
    rng = np.random.default_rng(len(transport) + copy)
    back = set(int(s) for s in rng.choice(np.arange(1, len(want)), size=6, replace=False))
    twice = min(back)
    got, gave = [], {s: 0 for s in back}
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="gb", transport=transport,
                copy=copy) as loader:
        for batch in loader:
            s = batch["step"]
            got.append((s, tokens_of(batch)))
            if s in gave and gave[s] < (2 if s == twice else 1):
                gave[s] += 1
                loader.give_back()
                assert loader.step == s - 1
    steps = [s for s, _ in got]
    expect = []
    for s in range(1, len(want) + 1):
        expect += [s] * (1 + (2 if s == twice else 1 if s in back else 0))
    assert steps == expect
    for s, t in got:
        assert np.array_equal(t, want[s - 1]), f"step {s} differs"


def test_give_back_refused_and_saved(daemon, config, tmp_path):
    want = reference(daemon, config)
    kw = dict(dp_rank=0, dp_size=1, socket=daemon.socket)
    with Loader(config, job="gb2", **kw) as loader:
        with pytest.raises(StateError, match="no batch to give back"):
            loader.give_back()
        it = iter(loader)
        for _ in range(5):
            next(it)
        loader.give_back()
        with pytest.raises(StateError, match="no batch to give back"):
            loader.give_back()  # once
        with pytest.raises(StateError, match="given back"):
            loader.set_weights({d["name"]: 1.0 for d in config["datasets"]})  # would change batch 5
        saved = loader.save(str(tmp_path / "ck"))  # after step 4: batch 5 was not taken
        assert saved.endswith("rank-0-of-1.json")
    with Loader(config, job="gb3", resume_from=str(tmp_path / "ck"), **kw) as resumed:
        first = next(iter(resumed))
        assert first["step"] == 5 and np.array_equal(tokens_of(first), want[4])


@pytest.mark.parametrize("transport,consumers", [("shm", 1), ("inline", 1), ("shm", 2)],
                         ids=["shm", "inline", "shm-group"])
def test_seek_forward(daemon, config, transport, consumers):
    # Near (the batches between read) and far (one consumer: the session
    # opened again at the step) seeks, one before the first batch and one
    # over a batch given back; then the rest, each batch as the
    # uninterrupted stream has it. A group's consumers each in a thread of
    # their own, as a trainer's processes are.
    want = reference(daemon, config)
    n = len(want)
    assert n > 60, "the corpus is too small for a far seek"
    far = n - 12

    def consume():
        with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job=f"seek-{transport}-{consumers}",
                    transport=transport, consumers=consumers) as lo:
            lo.seek(3)  # before any batch: the first one yielded is batch 3
            it = iter(lo)
            # A view is its slot's until the next batch is asked for: copied
            # before that (copying both after the second next() read batch 3's
            # slot after its release, and CI saw a later batch there).
            got = [(b["step"], tokens_of(b)) for b in (next(it),)]
            got += [(b["step"], tokens_of(b)) for b in (next(it),)]
            lo.give_back()  # batch 4 given back, then passed by the seek
            lo.seek(9)
            b = next(it)
            got.append((b["step"], tokens_of(b)))
            with pytest.raises(StateError, match="only moves forward"):
                lo.seek(9)
            lo.seek(far)
            return got + [(b["step"], tokens_of(b)) for b in it]

    with ThreadPoolExecutor(consumers) as pool:
        results = [f.result(timeout=120) for f in [pool.submit(consume) for _ in range(consumers)]]
    for r in results:
        assert [s for s, _ in r] == [3, 4, 9] + list(range(far, n + 1))
        for s, t in r:
            assert np.array_equal(t, want[s - 1]), f"step {s} differs"


def test_seek_past_the_end(daemon, config):
    n = len(reference(daemon, config))
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="end") as loader:
        loader.seek(n + 100)
        assert list(loader) == []
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="end-pad", end="pad") as loader:
        loader.seek(n + 1)  # the first padding batch
        b = next(iter(loader))
        assert b["padding"] and b["step"] == n + 1


GIVE_BACK_AND_DIE = """
import os, signal, sys
from dataloaderd import Loader
cfg, sock, mode, transport, copy = {cfg!r}, {sock!r}, {mode!r}, {transport!r}, {copy!r}
l = Loader(cfg, dp_rank=0, dp_size=1, socket=sock, job="die-" + mode, transport=transport, copy=copy)
it = iter(l)
for _ in range(6):
    b = next(it)
if mode == "give_back":
    l.give_back()  # batch 6 not committed, then the process dies
else:
    l.seek(40)  # far: the session reopened at step 39
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("mode,transport,copy", [("give_back", "shm", False), ("give_back", "shm", True),
                                                 ("give_back", "inline", False), ("seek", "shm", False)],
                         ids=["give_back-shm", "give_back-shm-copy", "give_back-inline", "seek-shm"])
def test_death_after_give_back_or_seek(daemon, config, mode, transport, copy):
    # The daemon keeps the session of a process that died (issue 27 item
    # 1): after a give_back the batch given back comes to the replacement
    # (with messages, inline, the releases still queued in the dead
    # process come before it); after a far seek, the batch sought.
    want = reference(daemon, config)
    script = GIVE_BACK_AND_DIE.format(cfg=config, sock=daemon.socket, mode=mode, transport=transport, copy=copy)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE] + sys.path)}
    assert subprocess.run([sys.executable, "-c", script], timeout=60, env=env).returncode == -9
    step = 6 if mode == "give_back" else 40
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="die-" + mode, transport=transport) as loader:
        it = iter(loader)
        b = next(it)
        assert loader.continued
        first = b["step"]
        assert first == step or (transport == "inline" and first < step), f"went on at {first}, want {step}"
        while True:
            assert np.array_equal(tokens_of(b), want[b["step"] - 1]), f"step {b['step']} differs"
            if b["step"] == step:
                break
            b = next(it)


@pytest.mark.parametrize("transport", ["shm", "inline"])
def test_seek_and_give_back_after_the_end(daemon, config, transport):
    # After the last batch a seek returns at once (it waited for a batch that
    # never comes, on inline), and a give_back is refused; with end="pad" a
    # seek moves the padding to the step asked for.
    kw = dict(dp_rank=0, dp_size=1, socket=daemon.socket, transport=transport, batch_timeout=5)
    with Loader(config, job="e-" + transport, **kw) as loader:
        n = len([b["step"] for b in loader])
        with pytest.raises(StateError, match="no batch to give back"):
            loader.give_back()
        loader.seek(n + 3)
        assert list(loader) == []
    with Loader(config, job="p-" + transport, end="pad", **kw) as loader:
        it = iter(loader)
        while not next(it)["padding"]:
            pass
        s = loader.step
        loader.seek(s + 5)
        assert next(it)["step"] == s + 5


def test_group_gives_back_a_refresh_step_then_the_daemon_restarts(tmp_path, config):
    # A group of two gives back the batch of a step at which the loaders
    # keep their state for a reconnect (every 32: the second such step,
    # when a state before it is kept too), after a change of weights; the
    # daemon then restarts: the batches after are those of a run without
    # the restart (the group reopens from the state kept before).
    from test_reconnect import Supervised
    config = {**config, "epochs": 3}
    last = 80
    weights = {d["name"]: w for d, w in zip(config["datasets"], (0.2, 1.0))}

    def run(sup, job, restart):
        got, errors, meet = {0: [], 1: []}, [], __import__("threading").Barrier(2)

        def consume(c):
            try:
                with Loader(config, dp_rank=0, dp_size=1, socket=sup.socket, job=job, consumers=2) as lo:
                    gave = False
                    for b in lo:
                        got[c].append((b["step"], tokens_of(b)))
                        if b["step"] == 3 and len(got[c]) == 3:
                            lo.set_weights(weights, step=4)
                        if b["step"] == 64 and not gave:
                            gave = True
                            lo.give_back()
                            meet.wait()
                            if restart and c == 0:
                                sup.kill()
                                sup.start()
                            meet.wait()
                        if b["step"] == last:
                            break
            except Exception as e:  # reported below, with the consumer
                errors.append(f"consumer {c}: {e!r}")

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(consume, (0, 1)))
        assert not errors, errors
        return got

    sup = Supervised(tmp_path)
    try:
        want, got = run(sup, "ref", False), run(sup, "run", True)
    finally:
        sup.stop()
    for c in (0, 1):
        assert [s for s, _ in got[c]] == [s for s, _ in want[c]]
        bad = [s for (s, a), (_, b) in zip(want[c], got[c]) if not np.array_equal(a, b)]
        assert bad == [], f"consumer {c}: steps {bad[:8]} differ after the restart"


@pytest.mark.parametrize("transport", ["shm", "inline"])
def test_session_opened_before_iterating_outlives_attach_within(tmp_path, config, transport):
    # save() before the first batch opens the session; a trainer may then
    # spend longer than --attach-within (a torchft heal, a model build)
    # before it iterates. The session must not be reclaimed as one whose
    # consumer never came: the loader's process is alive and holds it. (CI
    # saw train_torchft.py's groups fail with "no such session" this way.)
    from conftest import Daemon

    (tmp_path / "d").mkdir()
    d = Daemon(tmp_path / "d", ["--attach-within", "1s"])
    try:
        want = reference(d, config)
        with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="early", transport=transport) as loader:
            loader.save(str(tmp_path / "ck"))
            time.sleep(2.5)  # the reaper looks every attach_within / 4
            loader.save(str(tmp_path / "ck"))
            got = [tokens_of(b) for b in loader]
        assert len(got) == len(want)
        for s, (g, w) in enumerate(zip(got, want), 1):
            assert np.array_equal(g, w), f"step {s} differs"
    finally:
        d.stop()
