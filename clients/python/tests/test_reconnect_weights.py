"""A set_weights change queued for a later step rides through a daemon
restart: the loader reopens its session from the state it kept when it
asked for the change, which now carries the queued change, and the daemon
moves that state on to the last step yielded, taking the change at its
step on the way. Before, the kept state lost the queue: a change for a step
between the kept state and the restart was skipped over under the old
weights, and the batches after the restart differed."""

from __future__ import annotations

import signal
import threading

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import Loader
from test_reconnect import Supervised
from test_set_weights import inspect_json


@pytest.fixture
def supervised(tmp_path):
    d = Supervised(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def config(tmp_path):
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 31, "batch_size": 3, "seed": 9, "logical_shards": 8, "eos_id": 0, "datasets": datasets,
            "metadata": ["dataset_ids"]}


def test_queued_change_rides_through_a_daemon_restart(supervised, config):
    def run(job, kill_at=None):
        out = []
        with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job=job) as loader:
            for i, batch in enumerate(loader):
                step = i + 1
                out.append((np.asarray(batch["tokens"]).copy(), np.asarray(batch["dataset_ids"]).tolist()))
                if step == 10:
                    loader.set_weights({"d0": 0, "d1": 1}, step=15)
                if step == kill_at:
                    supervised.kill(signal.SIGKILL)
                    supervised.start()
                if step == 40:
                    break
            assert loader.reconnects == (1 if kill_at else 0)
        return out

    want = run("ref")
    got = run("run", kill_at=20)
    assert all(ds == [1, 1, 1] for _, ds in want[14:]), "steps 15 on should be of d1 alone"
    equal = sum(np.array_equal(a[0], b[0]) for a, b in zip(got, want))
    assert equal == len(want), f"{equal} of {len(want)} batches equal the run whose daemon never died"


@pytest.mark.parametrize("transport", ["shm", "inline"])
@pytest.mark.parametrize("when", ["down", "restarted"])
def test_set_weights_and_save_ride_through_a_restart(supervised, config, tmp_path, transport, when):
    """The daemon is killed (-9) at step 10 and started again as a
    supervisor would; set_weights and save are called while it is down
    (they wait for it) or right after it came back, before the loader
    noticed (the restarted daemon does not know the session). Both used to
    raise: DaemonUnavailableError while down, SessionNotFoundError after the
    restart (save too). Now they reopen the session and complete; the
    reopened session takes the change once, and the batches equal those of
    a run whose daemon never died. At step 25 a second restart, then save
    and state_dict; the saves resume where they were taken."""
    def run(job, kill=False):
        out = []
        with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job=job, transport=transport) as loader:
            for step, batch in enumerate(loader, start=1):
                out.append(np.asarray(batch["tokens"]).copy())
                if step in (10, 25) and kill:
                    supervised.kill(signal.SIGKILL)
                    if when == "down":
                        threading.Timer(0.3, supervised.start).start()
                    else:
                        supervised.start()
                if step == 10:
                    loader.set_weights({"d0": 0, "d1": 1}, step=14)
                    loader.save(str(tmp_path / job / "at-10"))
                if step == 25:
                    loader.save(str(tmp_path / job / "at-25"))
                    sd = loader.state_dict()
                if step == 40:
                    break
            assert loader.reconnects == (2 if kill else 0)
        return out, sd

    want, _ = run("ref")
    got, sd = run("run", kill=True)
    equal = sum(np.array_equal(a, b) for a, b in zip(got, want))
    assert equal == len(want) == 40, f"{equal} of {len(want)} batches equal the run whose daemon never died"
    seen = inspect_json(str(tmp_path / "run" / "at-10"))
    assert [(c["step"], c["weights"]) for c in seen["queued"]] == [(13, [0, 1])], seen["queued"]
    for at, first in (("at-10", 10), ("at-25", 25)):
        with Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job=f"resumed-{at}",
                    transport=transport, resume_from=str(tmp_path / "run" / at)) as res:
            again = [np.asarray(b["tokens"]).copy() for _, b in zip(range(5), res)]
        assert all(np.array_equal(a, b) for a, b in zip(again, want[first:first + 5])), f"resumed {at}"
    fresh = Loader(config, socket=supervised.socket, dp_rank=0, dp_size=1, job="dcp", transport=transport)
    fresh.load_state_dict(sd)
    with fresh:
        assert np.array_equal(np.asarray(next(iter(fresh))["tokens"]), want[25])
