"""loader.set_weights through the real daemon: a change for the next batch,
made while the daemon has already prefetched the following ones, is served
from that batch on (the prefetched batches are made again), equals a resume
with the new weights in the config, is kept by a save and a resume, and
shows in dataloaderd inspect. On shm (control block) and inline (messages:
the batches already on the stream are dropped)."""

from __future__ import annotations

import json
import subprocess
import time

import numpy as np
import pytest

from corpus import data_tokens, make_corpus
from dataloaderd import ConfigError, Loader, StateError, _control
from rundaemon import BIN

K = 5


@pytest.fixture
def config(tmp_path):
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 15, "batch_size": 3, "seed": 4, "logical_shards": 4, "eos_id": 0, "datasets": datasets,
            "metadata": ["dataset_ids"]}


def batches(it, n):
    return [(np.asarray(b["tokens"]).copy(), np.asarray(b["dataset_ids"]).tolist()) for _, b in zip(range(n), it)]


@pytest.mark.parametrize("transport", ["shm", "inline"])
def test_set_weights_remakes_prefetched_batches(daemon, config, tmp_path, transport):
    only_d1 = {"d0": 0, "d1": 1}
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="change", transport=transport) as loader:
        it = iter(loader)
        before = batches(it, K)
        time.sleep(0.3)  # the daemon fills its ring: steps K+1.. are made under the old weights
        loader.set_weights(only_d1)
        after = batches(it, 12)
        folder = str(tmp_path / "ckpt")
        loader.save(folder)
        more = batches(it, 6)
    assert any(0 in ds for _, ds in before), "the first batches should mix both datasets"
    assert all(ds == [1, 1, 1] for _, ds in after + more), [ds for _, ds in after]
    # The same as a resume at step K with the new weights in the config.
    ref_folder = str(tmp_path / "ref")
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="ref") as ref:
        batches(iter(ref), K)
        ref.save(ref_folder)
    weighed = dict(config, datasets=[dict(d, weight=float(d["name"] == "d1")) for d in config["datasets"]])
    with Loader(weighed, socket=daemon.socket, dp_rank=0, dp_size=1, job="ref2", resume_from=ref_folder) as ref2:
        want = batches(iter(ref2), 12)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(after, want)), "set_weights differs from a resume with those weights"
    # A save after the change keeps it: the original config resumes under it.
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="resumed", resume_from=folder) as res:
        got = batches(iter(res), 6)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(more, got))
    seen = json.loads(subprocess.run([BIN, "inspect", "--json", folder], capture_output=True, text=True,
                                     check=True).stdout)
    last = seen["mixture"][-1]
    assert last["runtime"] and last["step"] == K and last["weights"] == [0, 1]


def test_set_weights_refuses_bad_input(daemon, config):
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1) as loader:
        it = iter(loader)
        batches(it, 3)
        with pytest.raises(StateError, match="already yielded step 3"):
            loader.set_weights({"d0": 1, "d1": 1}, step=2)
        with pytest.raises(ConfigError, match='dataset "d1" has no weight'):
            loader.set_weights({"d0": 1})
        with pytest.raises(ConfigError, match='no dataset of the job is named "web"'):
            loader.set_weights({"d0": 1, "d1": 1, "web": 1})
        with pytest.raises(ConfigError, match="every weight is zero"):
            loader.set_weights({"d0": 0, "d1": 0})
        loader.set_weights({"d0": 1, "d1": 1}, step=10)  # a later step: taken when the rank gets there
        batches(it, 10)


def inspect_json(folder):
    return json.loads(subprocess.run([BIN, "inspect", "--json", folder], capture_output=True, text=True,
                                     check=True).stdout)


@pytest.mark.parametrize("queued", [1, 70])
def test_queued_changes_kept_by_a_save(daemon, config, tmp_path, queued):
    """The README's pattern: at step 10 a change for step 21 (and with 70,
    changes for steps 21 to 90, more than the 64 entries of history a log
    keeps), a save at step 15, a resume: the resumed run serves what the
    uninterrupted one does. The state saved after step 15 used to lose the
    queued change (5 of 15 batches equal), and 70 of them pushed the
    weights in effect out of the saved log (0 of 20)."""
    def changes(loader):
        for i in range(queued):
            loader.set_weights({"d0": i % 2, "d1": 1 - i % 2}, step=21 + i)

    n = 20 + queued  # steps 16 to 35 + queued - 1
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="whole") as whole:
        it = iter(whole)
        batches(it, 10)
        changes(whole)
        want = batches(it, 5 + n)[5:]
    folder = str(tmp_path / "ckpt")
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="saved") as loader:
        it = iter(loader)
        batches(it, 10)
        changes(loader)
        batches(it, 5)
        loader.save(folder)
    seen = inspect_json(folder)
    assert [c["step"] for c in seen["queued"]] == list(range(20, 20 + queued)), seen["queued"]
    assert not seen["mixture"][-1].get("runtime"), seen["mixture"]
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="resumed", resume_from=folder) as res:
        got = batches(iter(res), n)
    equal = sum(np.array_equal(a[0], b[0]) for a, b in zip(got, want))
    assert equal == n, f"{equal} of {n} batches after the resume equal the uninterrupted run's"
    assert all(ds == [1, 1, 1] for _, ds in got[5:6]), "step 21 should be of d1 alone"


def test_queue_bounded_and_overflow_refused(daemon, config):
    """At most 256 changes wait for later steps; one more is refused naming
    the bound. Weights whose sum overflows (1e308 and 1e308) are refused
    naming the sum."""
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="bounded") as loader:
        it = iter(loader)
        batches(it, 2)
        for i in range(256):
            loader.set_weights({"d0": 1, "d1": 1 + i % 2}, step=10 + i)
        with pytest.raises(StateError, match="at most 256 may wait"):
            loader.set_weights({"d0": 1, "d1": 1}, step=10 + 256)
        loader.set_weights({"d0": 1, "d1": 3}, step=12)  # replaces the changes from step 12 on
        with pytest.raises(ConfigError, match=r"sum to \+Inf, more than 1e\+100"):
            loader.set_weights({"d0": 1e308, "d1": 1e308})
        batches(it, 3)


def _wait_ended(loader, step):
    """On shm, waits until the daemon announced that the rank's iteration
    ends before step (the case that lost data); inline has no block
    to look at: a moment lets the daemon run ahead to the end."""
    ctl = loader._ctl
    if ctl is None:
        time.sleep(0.3)
        return
    deadline = time.monotonic() + 20
    while ctl.poll(step)[0] != _control.ENDED:
        assert time.monotonic() < deadline, "the daemon did not reach the end of the epoch"
        time.sleep(0.005)


@pytest.mark.parametrize("transport", ["shm", "inline"])
@pytest.mark.parametrize("end", ["stop", "pad"])
def test_set_weights_at_the_end_of_the_epoch(daemon, tmp_path, transport, end):
    """The soak's data loss: a bounded epoch of E steps; after the batch of
    step E-k a change for step E-k+1, asked once the daemon had made the
    last batch and found the end. The epoch used to end after step E-k (the
    rank made again was never run and the end stayed announced), and the
    tokens of the last k batches were never served (63, 106 and 147 tokens
    for k = 1, 2, 3 in the soak author's corpus). Every token is served
    once, the epoch still ends after step E; with end="pad" padding
    follows, a change at a padding step is taken, and a save there resumes
    to padding alone."""
    datasets, ranges = make_corpus(str(tmp_path), seed=1)
    cfg = {"seq_len": 31, "batch_size": 2, "seed": 1, "logical_shards": 6, "eos_id": 0, "epochs": 1,
           "datasets": datasets}
    want = list(range(ranges[0][0], ranges[-1][1]))
    with Loader(cfg, socket=daemon.socket, dp_rank=0, dp_size=1, job="whole", transport=transport) as whole:
        last = max(b["step"] for b in whole)
    for k in (1, 2, 3):
        served, steps, padding = [], [], 0
        folder = str(tmp_path / f"pad-{k}")
        with Loader(cfg, socket=daemon.socket, dp_rank=0, dp_size=1, job=f"k{k}", transport=transport,
                    end=end, slots=8) as loader:  # room for the daemon to run to the end
            for b in loader:
                if b["padding"]:
                    padding += 1
                    if padding == 2:
                        loader.set_weights({"d0": 2, "d1": 1}, step=b["step"] + 2)
                        loader.save(folder)
                        break
                    continue
                served += data_tokens(b["tokens"]).tolist()
                steps.append(b["step"])
                if b["step"] == last - k:
                    _wait_ended(loader, last + 1)
                    loader.set_weights({"d0": 1, "d1": 2}, step=last - k + 1)
        assert steps == list(range(1, last + 1)), f"k={k}: the epoch ends after step {steps[-1]}, not {last}"
        assert sorted(served) == want, f"k={k}: {len(set(want) - set(served))} tokens lost, " \
                                       f"{len(served) - len(set(served))} repeated"
        if end == "pad":
            assert padding == 2
            with Loader(cfg, socket=daemon.socket, dp_rank=0, dp_size=1, job=f"r{k}", transport=transport,
                        end=end, resume_from=folder) as res:
                again = [b for _, b in zip(range(3), res)]
            assert [b["padding"] for b in again] == [True] * 3
            assert again[0]["step"] == last + 3


@pytest.mark.parametrize("transport", ["shm", "inline"])
def test_a_change_for_a_later_step_keeps_the_batches_before_it(daemon, config, transport):
    """At step 10, a change from step 14 on, once the daemon has made (and on
    inline sent) steps past 14: steps 11 to 13 were made under the old
    weights and stay good, the later ones are made again. On inline the
    loader used to drop every message older than the change, 11 to 13
    included, and waited for them until batch_timeout. The batches equal a
    run whose rank took the change before making step 11 (shm, no batch
    ahead), and from step 14 on are of d1 alone."""
    def run(job, transport, ahead):
        with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job=job, transport=transport,
                    batch_timeout=20) as loader:
            it = iter(loader)
            batches(it, 10)
            if ahead:
                time.sleep(0.3)  # the daemon fills its ring (and the stream): steps 11.. are made
            loader.set_weights({"d0": 0, "d1": 1}, step=14)
            return [(b["step"], np.asarray(b["tokens"]).copy(), np.asarray(b["dataset_ids"]).tolist())
                    for _, b in zip(range(10), it)]

    got = run("ahead", transport, True)
    want = run("ref", "shm", False)
    assert [s for s, _, _ in got] == list(range(11, 21))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(got, want)), "batches differ from the rank changed in time"
    assert all(ds == [1, 1, 1] for _, _, ds in got[3:]), "steps 14 on should be of d1 alone"
