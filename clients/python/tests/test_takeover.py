"""A replica group that stays down: its shards taken over by the live groups,
exactly (docs/rank-restart.md, "A group that stays down"). Each group saves
its KB-sized state after every committed step into one shared folder; when
a group is gone for good, the live ones open again on the smaller world from
that folder (a rescale from files of different steps: each shard's cursor
is where its owner last committed). Every token once, over the groups'
batches before and after. Processes stand in for torchft's groups here;
tests_torch/test_torchft.py runs torchft itself for a group that heals."""

import time

import numpy as np

from corpus import make_corpus
from dataloaderd import Loader


def tokens_of(batch):
    t = np.asarray(batch["tokens"]).ravel()
    return t[t != 0].copy()


def test_live_groups_take_over_a_dead_groups_shards(daemon, tmp_path):
    datasets, ranges = make_corpus(str(tmp_path))
    config = {"seq_len": 16, "batch_size": 2, "seed": 11, "logical_shards": 12, "eos_id": 0, "epochs": 1,
              "datasets": datasets}
    positions = str(tmp_path / "positions" / "world-3")  # one folder per world
    kw = dict(socket=daemon.socket, job="ft")
    groups = [Loader(config, dp_rank=g, dp_size=3, **kw) for g in range(3)]
    its = [iter(lo) for lo in groups]
    served, saves = [], []
    for step in range(1, 21):
        for g, (lo, it) in enumerate(zip(groups, its)):
            if g == 2 and step > 7:
                continue  # group 2 died after committing step 7, and stays down
            served.append(tokens_of(next(it)))
            t = time.perf_counter()
            lo.save(positions)  # after the step committed
            saves.append(time.perf_counter() - t)
    groups[2]._shut(tell_daemon=False)  # its process is gone
    # The live groups (0 and 1) decide, at the same step, to take over:
    # each opens rank g of 2 from the folder, and reads the rest.
    for lo in groups[:2]:
        lo.close()
    for g in range(2):
        with Loader(config, dp_rank=g, dp_size=2, resume_from=positions, **kw) as lo:
            served += [tokens_of(b) for b in lo]
            assert lo.step > 20
    got = np.sort(np.concatenate(served))
    corpus = np.arange(ranges[0][0], ranges[-1][1], dtype=np.int32)
    assert got.size == corpus.size and np.array_equal(got, corpus), "tokens lost or served twice"
    print(f"\nsave after each step: median {np.median(saves) * 1e3:.2f} ms, max {max(saves) * 1e3:.2f} ms")
