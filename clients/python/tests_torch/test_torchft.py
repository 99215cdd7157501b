"""torchft replica groups lose no data (issue 27): examples/train_torchft.py
with two replica groups on torchft 0.2.0 (its lighthouse, gloo on the CPU);
group 1's process is killed (SIGKILL, mid-step, as it takes its k-th batch,
k random) and restarted with the same command, healing its weights from
group 0, which trains on alone meanwhile.
Each group's committed batches, over its processes, are its uninterrupted
stream, each batch once and in order; the groups' tokens are disjoint.
docs/rank-restart.md, "torchft"."""

import numpy as np
import pytest

from dataloaderd import Loader
from rundaemon import Daemon
from torchft_job import GROUPS, accounting, corpus_tokens, job_config, run_job, tokens_of

STEPS = 80


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


def test_torchft_group_killed_and_healed_loses_nothing(daemon, tmp_path):
    config = job_config(str(tmp_path), seed=3)
    run = run_job(str(tmp_path), config, daemon.socket, "dataloaderd", STEPS, kills=2, seed=3)
    assert run.deaths >= 1, "group 1 was never killed"
    want = []
    for g in range(GROUPS):
        with Loader(config, dp_rank=g, dp_size=GROUPS, socket=daemon.socket, job=f"ref-{g}") as ref:
            want.append([np.asarray(b["tokens"]).copy() for b in ref])
    # Every trainer step committed, by one group or both (a group that
    # starts first trains alone until the other joins and heals from it).
    assert sorted(set(s for log in run.logs.values() for s, _, _ in log)) == list(range(1, STEPS + 1))
    # (A group's trainer steps need not rise: on a loaded machine a group
    # whose peer's heartbeats came late trains alone for a while, and its
    # steps go back when it heals from the peer. Its data does not.)
    for g, log in run.logs.items():
        assert [d for _, d, _ in log] == list(range(1, len(log) + 1)), \
            f"group {g}: its committed data steps are not its stream's first {len(log)}, each once"
        for _, d, t in log:
            assert np.array_equal(t.reshape(want[g][d - 1].shape), want[g][d - 1]), f"group {g}: data step {d} differs"
        lost, repeated = accounting([t for _, _, t in log], np.concatenate([w.ravel() for w in want[g][:len(log)]]))
        assert (lost, repeated) == (0, 0)
    served = [np.concatenate([tokens_of(t) for _, _, t in run.logs[g]]) for g in range(GROUPS)]
    assert np.intersect1d(served[0], served[1]).size == 0, "a token trained in both groups"
    print(f"\ntorchft: {run.deaths} deaths of group 1; group 1 committed {len(run.logs[1])} of {STEPS} steps; "
          f"restart to first committed step (heal included): {', '.join(f'{s:.2f} s' for s in run.first_commit_s)}")


def test_torchft_group_down_taken_over(daemon, tmp_path):
    # Group 1 dies for good (kill -9 of itself as it takes its 9th batch);
    # with --positions, group 0 takes over its shards after 3 quorums
    # without it, from the groups' saved states, and reads to the end of
    # the epoch: every corpus token trained once, over both groups.
    config = job_config(str(tmp_path), seed=4, sizes=((50, 50), (30, 40)))  # about 60 batches
    # Both groups there before either trains: else group 0 may read its
    # whole stream before group 1 starts, and nothing is left to take over.
    positions = ["--positions", str(tmp_path / "positions"), "--take-over-after", "3", "--pause", "0.005",
                 "--wait-for", "2"]
    run = run_job(str(tmp_path), config, daemon.socket, "dataloaderd", 10**6, kills=0, seed=4,
                  extra=(positions, positions + ["--die-at", "9"]), exits=(0, -9))
    steps1 = [d for _, d, _ in run.logs[1]]
    assert steps1 == list(range(1, len(steps1) + 1)) and len(steps1) >= 4, f"group 1 committed {steps1}"
    assert sorted((tmp_path / "positions").iterdir())[-1].name == "world-1", "no take-over"
    served = np.sort(np.concatenate([tokens_of(t) for log in run.logs.values() for _, _, t in log]))
    assert np.array_equal(served, corpus_tokens(config)), "tokens lost or trained twice"
