"""end="pad": after a bounded run's last batch, every rank goes on with
padding batches, so that all ranks take the same steps; exact through a
resume from a padding step."""

import numpy as np
import pytest

from dataloaderd import ConfigError, Loader
from corpus import data_tokens, make_corpus

PAD = 1_000_000  # above every token of the test corpus


@pytest.fixture
def bounded(tmp_path):
    datasets, ranges = make_corpus(str(tmp_path))
    config = {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 8, "eos_id": 0, "pad_id": PAD,
              "epochs": 1, "datasets": datasets}
    total = sum(hi - lo for lo, hi in ranges)
    return config, total


def real_batches(config, daemon, rank, size, job):
    with Loader(config, dp_rank=rank, dp_size=size, socket=daemon.socket, job=job) as loader:
        return [(b["step"], np.array(b["tokens"])) for b in loader]


def test_ranks_pad_to_the_same_step(daemon, bounded):
    config, total = bounded
    plain = [real_batches(config, daemon, r, 3, f"plain{r}") for r in range(3)]
    lengths = [len(p) for p in plain]
    assert len(set(lengths)) > 1, "this corpus should end its ranks at different steps"
    loaders = [Loader(config, dp_rank=r, dp_size=3, socket=daemon.socket, job=f"pad{r}", end="pad") for r in range(3)]
    its = [iter(x) for x in loaders]
    seen = []
    for step in range(1, max(lengths) + 4):
        batches = [next(it) for it in its]
        for r, b in enumerate(batches):
            assert b["step"] == step
            if step <= lengths[r]:
                assert not b["padding"] and np.array_equal(b["tokens"], plain[r][step - 1][1])
                seen.append(data_tokens(b["tokens"]))
            else:
                assert b["padding"] and (np.asarray(b["tokens"]) == PAD).all()
                assert (np.asarray(b["shift_labels"]) == PAD).all() and b["lines"] == config["batch_size"]
    for x in loaders:
        x.close()
    served = np.concatenate(seen)
    served = served[served != PAD]
    assert len(served) == len(set(served.tolist())) == total, "a token lost or repeated under end='pad'"


def test_resume_from_a_padding_step(daemon, bounded, tmp_path):
    config, _ = bounded
    n = len(real_batches(config, daemon, 0, 1, "n"))
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="a", end="pad") as a:
        it = iter(a)
        last = [next(it) for _ in range(n + 2)][-1]
        assert last["padding"] and last["step"] == n + 2
        sd = a.state_dict()
        a.save(str(tmp_path))
    for kind in ("state_dict", "folder"):
        kw = {"resume_from": str(tmp_path)} if kind == "folder" else {}
        with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job=f"b{kind}", end="pad", **kw) as b:
            if kind == "state_dict":
                b.load_state_dict(sd)
            assert b.step == n + 2
            nxt = next(iter(b))
            assert nxt["padding"] and nxt["step"] == n + 3, kind
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="c", resume_from=str(tmp_path)) as c:
        assert list(c) == [], "a resume past the end with end='stop' ends at once"
    with pytest.raises(ConfigError, match="end"):
        Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, end="wrap")
