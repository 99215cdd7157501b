"""A set_weights change queued for a later step rides through a daemon
restart: the loader reopens its session from the state it kept when it
asked for the change, which now carries the queued change, and the daemon
moves that state on to the last step yielded, taking the change at its
step on the way. Before, the kept state lost the queue: a change for a step
between the kept state and the restart was skipped over under the old
weights, and the batches after the restart differed."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import Loader
from test_reconnect import Supervised


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
