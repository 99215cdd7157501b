"""The Loader against the real daemon: determinism, resume, transports,
mixing, tensor-parallel consumers, state dicts, zero copy, reclaiming."""

import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from corpus import make_corpus
from dataloaderd import Loader, SessionExistsError, StateError


@pytest.fixture
def config(tmp_path):
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 8, "eos_id": 0, "datasets": datasets}


def take(loader, n):
    out = []
    for batch in loader:
        out.append((batch["step"], np.array(batch["tokens"])))
        if len(out) == n:
            break
    return out


def same(a, b):
    return len(a) == len(b) and all(sa == sb and np.array_equal(ta, tb) for (sa, ta), (sb, tb) in zip(a, b))


def test_determinism_and_resume(daemon, config, tmp_path):
    with Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="x") as a:
        first = take(a, 20)
    with Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="y") as b:
        assert same(take(b, 20), first), "two runs of one config differ"
    ckpt = str(tmp_path / "ckpt")
    with Loader(config, dp_rank=0, dp_size=2, socket=daemon.socket, job="z0") as r0, \
            Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="z") as r1:
        take(r0, 3)
        take(r1, 8)
        r0.save(ckpt)
        path = r1.save(ckpt)
        assert path.endswith(os.path.join("dataloader", "rank-1-of-2.json"))
    with Loader(config, dp_rank=1, dp_size=2, socket=daemon.socket, job="w", resume_from=ckpt) as c:
        resumed = take(c, 12)
    assert [s for s, _ in resumed] == list(range(9, 21))
    assert same(resumed, first[8:]), "resumed run differs from the uninterrupted one"


def test_inline_equals_shm(daemon, config):
    with Loader(config, socket=daemon.socket, job="s", dp_rank=0, dp_size=1) as s, \
            Loader(config, socket=daemon.socket, job="i", dp_rank=0, dp_size=1, transport="inline") as i:
        assert same(take(s, 15), take(i, 15))


def test_zero_copy_views(daemon, config):
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1) as loader:
        batch = next(iter(loader))
        tokens = batch["tokens"]
        assert not tokens.flags.writeable and not tokens.flags.owndata
        base = tokens
        while isinstance(base, np.ndarray):
            base = base.base
        owner = base.obj if isinstance(base, memoryview) else base
        assert isinstance(owner, mmap.mmap), f"tokens are not a view of the ring: {type(owner)}"
        assert np.shares_memory(batch["input_ids"], tokens)
        assert np.array_equal(np.asarray(batch["labels"])[:, :-1], np.asarray(batch["input_ids"])[:, 1:])
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, copy=True, job="c") as loader:
        assert next(iter(loader))["tokens"].flags.owndata


def test_mixing_follows_weights(daemon, tmp_path):
    datasets, ranges = make_corpus(str(tmp_path))
    datasets[0]["weight"], datasets[1]["weight"] = 3.0, 1.0
    config = {"seq_len": 15, "batch_size": 1, "seed": 2, "logical_shards": 8, "eos_id": 0, "datasets": datasets}
    for rank in range(2):
        lines = [0, 0]
        with Loader(config, dp_rank=rank, dp_size=2, socket=daemon.socket) as loader:
            for n, batch in enumerate(loader, 1):
                tok = batch["tokens"][0]
                value = tok[tok != 0][0]
                lines[0 if value < ranges[0][1] else 1] += 1
                assert abs(lines[0] - 0.75 * n) <= 1 and abs(lines[1] - 0.25 * n) <= 1, (n, lines)
                if n == 400:
                    break


def test_tensor_parallel_consumers(daemon, config):
    kw = dict(dp_rank=0, dp_size=1, socket=daemon.socket, job="tp", consumers=2)
    a, b = Loader(config, **kw), Loader(config, **kw)
    ia, ib = iter(a), iter(b)
    with pytest.raises(SessionExistsError, match="2 consumers"):
        iter(Loader(config, **kw))
    for _ in range(10):
        x, y = next(ia), next(ib)
        assert x["step"] == y["step"] and np.array_equal(x["tokens"], y["tokens"])
    a.close()
    b.close()


def test_state_dict_round_trip(daemon, config):
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="sd") as a:
        take(a, 5)
        sd = a.state_dict()
        rest = take(a, 7)
    assert sd["step"] == 5 and sd["dp_size"] == 1 and isinstance(sd["state"], bytes)
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="sd2") as b:
        b.load_state_dict(sd)
        assert same(take(b, 7), rest)
    with Loader(config, dp_rank=0, dp_size=2, socket=daemon.socket, job="sd3") as c:
        with pytest.raises(StateError, match="resume_from"):
            c.load_state_dict(sd)


def test_killed_client_is_reclaimed(daemon, config, tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys
        from dataloaderd import Loader
        loader = Loader({config!r}, dp_rank=0, dp_size=1, socket={daemon.socket!r}, job="k")
        it = iter(loader)
        next(it); next(it)
        print("ready", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL and "ready" in p.stdout, p.stderr
    deadline = time.time() + 10
    while daemon.rings() and time.time() < deadline:
        time.sleep(0.05)
    assert daemon.rings() == [], "the dead client's ring was not removed"
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="k") as again:
        assert next(iter(again))["step"] == 1
