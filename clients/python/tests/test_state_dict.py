"""state_dict()/load_state_dict(): a rank's state split by shard, so that
torch.distributed.checkpoint keeps every rank's and reshards it (the DCP
flow itself runs under torchrun in tests_torch/)."""

import numpy as np
import pytest

from dataloaderd import Loader, StateError
from dataloaderd import _state

from rundaemon import dataloaderd_maps
from test_loader import same, take


def test_state_dict_round_trip(daemon, config):
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="sd") as a:
        take(a, 5)
        sd = a.state_dict()
        rest = take(a, 7)
    assert sd["version"] == 2 and isinstance(sd["run"], bytes) and _state.step_of(sd["run"]) == 5
    assert set(sd["shards"]) == {"0", "1"} and all(len(v) == 8 for v in sd["shards"].values())
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="sd2") as b:
        b.load_state_dict(sd)
        assert b.step == 5 and b._session is None, "the resumed step is known before a session opens"
        assert same(take(b, 7), rest)
    with Loader(config, dp_rank=0, dp_size=2, socket=daemon.socket, job="sd3") as c:
        with pytest.raises(StateError, match="owns 8.*not its own"):
            c.load_state_dict(sd)  # rank 0 of 2 owns half of these cursors
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="sd4") as d:
        take(d, 2)
        d.load_state_dict(sd)  # closes the open session; the next iteration resumes
        assert same(take(d, 7), rest)


def test_state_dicts_pooled_by_shard_reshard(daemon, config, tmp_path):
    # What DCP does: every rank's dict saved, keys pooled (the run part is
    # the same on every rank, so one copy is kept), and each rank of the new
    # world loads the keys its own template asks for. The new world serves
    # what a resume from the old world's rank files serves.
    pool, runs = {}, set()
    for r in range(2):
        with Loader(config, dp_rank=r, dp_size=2, socket=daemon.socket, job=f"old{r}") as a:
            take(a, 6)
            sd = a.state_dict()
            a.save(str(tmp_path))
        runs.add(sd["run"])
        for d, shards in sd["shards"].items():
            for k, v in shards.items():
                pool[(d, k)] = np.asarray(v)
    assert len(runs) == 1, "the run parts of two ranks of one world differ"
    for r in range(3):
        with Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"files{r}",
                    resume_from=str(tmp_path)) as f:
            assert f.step == 6
            want = take(f, 5)
        with Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"dcp{r}") as g:
            template = g.state_dict()
            assert g._session is None, "the template opened a session"
            loaded = {"version": 2, "run": next(iter(runs)),
                      "shards": {d: {k: pool[(d, k)] for k in ks} for d, ks in template["shards"].items()}}
            g.load_state_dict(loaded)
            assert same(take(g, 5), want), f"rank {r} of 3 resumed from pooled cursors differs"


def test_template_is_the_initial_state(daemon, config):
    # A fresh loader's state dict is built without a session: zero cursors of
    # the shards it owns, an empty run; loaded, it starts at the first batch.
    with Loader(config, dp_rank=1, dp_size=3, socket=daemon.socket, job="t") as a:
        sd = a.state_dict()
        assert a._session is None and not dataloaderd_maps(daemon.proc.pid), "the template opened a session"
    shards = config["logical_shards"]
    lo, hi = 1 * shards // 3, 2 * shards // 3  # rank r of w owns [r*S/w, (r+1)*S/w) (docs/design.md)
    assert sd["run"] == b"" and set(sd["shards"]["0"]) == {str(k) for k in range(lo, hi)}
    assert all(not np.asarray(v).any() for shards in sd["shards"].values() for v in shards.values())
    with Loader(config, dp_rank=1, dp_size=3, socket=daemon.socket, job="t2") as b:
        first = take(b, 3)
    with Loader(config, dp_rank=1, dp_size=3, socket=daemon.socket, job="t3") as c:
        c.load_state_dict(sd)
        assert c.step == 0 and same(take(c, 3), first)


def test_version_1_state_dicts_still_load(daemon, config):
    # Checkpoints written by clients before the split hold one rank's state
    # file; they resume on the same dp_size and say why not on another.
    from dataloaderd._proto import dataloader_pb2 as pb
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="v1") as a:
        take(a, 4)
        resp = a._stub.GetState(pb.GetStateRequest(session_id=a._session.session_id, step=4))
        rest = take(a, 5)
    sd = {"version": 1, "dp_rank": 0, "dp_size": 1, "step": 4, "state": resp.state}
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="v1b") as b:
        b.load_state_dict(sd)
        assert b.step == 4 and same(take(b, 5), rest)
    with Loader(config, dp_rank=0, dp_size=2, socket=daemon.socket, job="v1c") as c:
        with pytest.raises(StateError, match="dp_size 1.*resume_from"):
            c.load_state_dict(sd)
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="v1d") as d:
        with pytest.raises(StateError, match="version 7"):
            d.load_state_dict({"version": 7})


def test_step_after_resume_from_is_the_resumed_step(daemon, config, tmp_path):
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="s") as a:
        take(a, 3)
        a.save(str(tmp_path))
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="s2", resume_from=str(tmp_path)) as b:
        assert b._session is None
        # The daemon reads the folder (test_folders.py): the step is its
        # session's start.
        assert b.step == 3 and b._session is not None and b._session.start_step == 3
        assert take(b, 1)[0][0] == 4
