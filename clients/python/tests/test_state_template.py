"""The state dict before the first batch, and the check of a loaded one, take
the shards a rank owns from the daemon (StateTemplate), which owns that rule:
they agree with what its sessions own, uneven splits included."""

import threading
import time

import grpc
import numpy as np
import pytest

from dataloaderd import DaemonUnavailableError, DataloaderdError, Loader, StateError, TransportUnavailableError

from test_loader import same, take
from test_reconnect import Supervised


def keys(sd):
    """A state dict's (dataset, shard) keys."""
    return {(int(d), int(k)) for d, shards in sd["shards"].items() for k in shards}


def test_template_and_check_agree_with_the_daemon_on_uneven_splits(daemon, config):
    # 7 shards over 3 ranks: blocks of 2, 2 and 3 in each of the 2 datasets.
    config = dict(config, logical_shards=7)
    blocks = [(0, 2), (2, 4), (4, 7)]
    live = []
    for r, (lo, hi) in enumerate(blocks):
        with Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"tpl{r}") as fresh:
            template = fresh.state_dict()
            assert fresh._session is None, "the template opened a session"
        with Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"run{r}") as run:
            take(run, 2)
            live.append(run.state_dict())
        assert keys(template) == {(d, k) for d in (0, 1) for k in range(lo, hi)}, f"rank {r} of 3"
        assert keys(template) == keys(live[r]), f"rank {r} of 3: the template is not what its session owns"
        assert template["run"] == b"" and not any(np.asarray(v).any() for s in template["shards"].values()
                                                   for v in s.values())
    assert set().union(*(keys(sd) for sd in live)) == {(d, k) for d in (0, 1) for k in range(7)}
    for r in range(3):
        with Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"load{r}") as b:
            b.load_state_dict(live[r])  # its own: the check passes
            assert b.step == 2
            for q in range(3):
                if q == r:
                    continue
                lo, hi = blocks[r]
                with pytest.raises(StateError, match=(
                        rf"holds the cursors of {len(keys(live[q]))} shards, dp_rank {r} of 3 owns {2 * (hi - lo)} "
                        rf"\(shards {lo} to {hi - 1} of each dataset\); missing .*; not its own")):
                    b.load_state_dict(live[q])


def test_pooled_cursors_reshard_onto_an_uneven_split(daemon, config, tmp_path):
    # DCP's flow from 2 ranks onto 3 with 7 shards: each new rank loads the
    # keys of the template the daemon gave it, and serves what a resume from
    # the old world's files serves.
    config = dict(config, logical_shards=7)
    pool, run = {}, None
    for r in range(2):
        with Loader(config, dp_rank=r, dp_size=2, socket=daemon.socket, job=f"old{r}") as a:
            take(a, 4)
            sd = a.state_dict()
            a.save(str(tmp_path))
        run = sd["run"]
        pool.update({(d, k): v for d, shards in sd["shards"].items() for k, v in shards.items()})
    for r in range(3):
        with Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"files{r}",
                    resume_from=str(tmp_path)) as f:
            want = take(f, 4)
        with Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"dcp{r}") as g:
            template = g.state_dict()
            g.load_state_dict({"version": 2, "run": run, "shards": {
                d: {k: pool[(d, k)] for k in ks} for d, ks in template["shards"].items()}})
            assert g.step == 4 and same(take(g, 4), want), f"rank {r} of 3"


def test_template_is_asked_once_and_waits_for_a_restarted_daemon(tmp_path, config):
    d = Supervised(tmp_path)
    try:
        with Loader(config, dp_rank=1, dp_size=3, socket=d.socket, job="w") as waits, \
                Loader(config, dp_rank=1, dp_size=3, socket=d.socket, job="o", reconnect_timeout=0) as once:
            first = once.state_dict()
            d.kill()
            # Asked once: a loader that had it needs no daemon for it again.
            assert keys(once.state_dict()) == keys(first)
            with pytest.raises(StateError, match=r"dp_rank 1 of 3 owns 6 \(shards 2 to 4 of each dataset\)"):
                once.load_state_dict({"version": 2, "run": b"", "shards": {}})
            with Loader(config, dp_rank=0, dp_size=3, socket=d.socket, job="n", reconnect_timeout=0) as none:
                with pytest.raises(DaemonUnavailableError):
                    none.state_dict()
            restart = threading.Timer(0.3, d.start)
            restart.start()
            start = time.monotonic()
            sd = waits.state_dict()  # waits (reconnect_timeout) for the daemon to come back
            restart.join()
            assert time.monotonic() - start >= 0.25 and keys(sd) == keys(first)
    finally:
        d.stop()


class _Unimplemented(grpc.RpcError):
    """What an older daemon, without StateTemplate, answers."""

    def code(self):
        return grpc.StatusCode.UNIMPLEMENTED

    def details(self):
        return "unknown method StateTemplate for service dataloaderd.v1.Loader"


def test_a_daemon_without_the_template_is_named_as_too_old(daemon, config, monkeypatch):
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="old-daemon") as loader:
        def unimplemented(*_args, **_kwargs):
            raise _Unimplemented()

        monkeypatch.setattr(loader._stub, "StateTemplate", unimplemented)
        with pytest.raises(DataloaderdError, match="older than this client.*no StateTemplate") as err:
            loader.state_dict()
        assert not isinstance(err.value, TransportUnavailableError)
