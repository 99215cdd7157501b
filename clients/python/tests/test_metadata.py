"""Document metadata beside the tokens, through the real daemon: every field
checked against the documents the corpus was written from, on shm and
inline; and a run saved, its daemon killed (-9), and resumed onto another
world size serves every line with the same metadata as a run never
stopped."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from corpus import unique_docs, write_megatron
from dataloaderd import Loader

PAD = 999_999
FIELDS = ["position_ids", "document_ids", "cu_seqlens", "loss_mask", "dataset_ids"]


def corpus(tmp_path) -> Tuple[Dict[str, Any], Dict[int, Tuple[int, int, int]]]:
    """A config of two Megatron datasets, and where each token value lies:
    value -> (dataset, first value of its document, length of the document)."""
    rng = np.random.default_rng(7)
    where: Dict[int, Tuple[int, int, int]] = {}
    datasets, first = [], 1
    for i, (n, max_len) in enumerate(((60, 50), (40, 9))):
        docs, first = unique_docs(rng, n, max_len, first)
        for d in docs:
            for v in d:
                where[int(v)] = (i, int(d[0]), len(d))
        datasets.append({"name": f"d{i}", "path": write_megatron(os.path.join(tmp_path, f"d{i}"), docs),
                         "format": "megatron", "weight": 1.0 + i})
    cfg = {"seq_len": 23, "batch_size": 3, "seed": 3, "logical_shards": 6, "eos_id": 0, "pad_id": PAD,
           "epochs": 1, "datasets": datasets, "metadata": FIELDS, "positions": "continue",
           "mask_document_boundaries": True}
    return cfg, where


def lines_of(batch) -> List[Dict[str, Any]]:
    """A batch's lines, each with its metadata as plain lists."""
    cu, segs = np.asarray(batch["cu_seqlens"]), np.asarray(batch["line_segments"])
    seq = batch["input_ids"].shape[1]
    assert cu[0] == 0 and segs[-1] + 1 == len(cu)
    assert batch["max_seqlen"] == int(np.diff(cu).max())
    out = []
    for b in range(batch["lines"]):
        line_cu = cu[segs[b]:segs[b + 1] + 1] - b * seq
        out.append({"tokens": np.asarray(batch["tokens"][b]).tolist(),
                    "pos": np.asarray(batch["position_ids"][b]).tolist(),
                    "doc": np.asarray(batch["document_ids"][b]).tolist(),
                    "loss": np.asarray(batch["loss_mask"][b]).tolist(),
                    "dataset": int(batch["dataset_ids"][b]), "cu": line_cu.tolist()})
    return out


def check(line: Dict[str, Any], where: Dict[int, Tuple[int, int, int]]) -> None:
    toks, pos, doc = line["tokens"], line["pos"], line["doc"]
    seq = len(pos)
    inputs = toks[:seq]
    filled = len([t for t in toks if t != PAD])
    assert toks[filled:] == [PAD] * (len(toks) - filled)
    # Each token's document and place: a data token names them; an EOS is
    # its document's last token.
    key: List[Any] = []
    for k, t in enumerate(inputs):
        if t == PAD:
            key.append(("pad",))
        elif t != 0:
            ds, start, n = where[t]
            assert line["dataset"] == ds
            key.append((ds, start))
            assert pos[k] == t - start, (k, line)
        elif k > 0 and key[k - 1][0] != "pad" and key[k - 1][0] != "eos":
            key.append(key[k - 1])  # the EOS that ends the document before it
            assert pos[k] == where[inputs[k - 1]][2], line
        else:
            key.append(("eos", k))  # ends a document continued from the line before
    for k in range(seq):
        if key[k] == ("pad",):
            assert doc[k] == -1 and pos[k] == 0
        for j in range(k):
            if key[j] != ("pad",) and key[k] != ("pad",):
                assert (key[j] == key[k]) == (doc[j] == doc[k]), (j, k, line)
    want = [0] + [k for k in range(1, seq) if doc[k] != doc[k - 1]] + [seq]
    assert line["cu"] == want, line
    for k in range(seq):
        nxt = toks[k + 1]
        learn = nxt != PAD and not (k + 1 < seq and doc[k + 1] != doc[k]) and not (
            k + 1 == seq and nxt != 0 and where[nxt][1] == nxt)  # the label starts a document
        assert bool(line["loss"][k]) == learn, (k, line)


def run(sock: str, cfg, world: int, resume=None, steps=None, save=None) -> List[Dict[str, Any]]:
    """Every rank's lines, up to steps batches each (None: to the end)."""
    out = []
    for r in range(world):
        with Loader(cfg, socket=sock, dp_rank=r, dp_size=world, job=f"m{world}{save or ''}",
                    resume_from=resume) as loader:
            for i, batch in enumerate(loader):
                out += lines_of(batch)
                if steps is not None and i + 1 == steps:
                    loader.save(save)
                    break
    return out


@pytest.mark.parametrize("transport", ["shm", "inline"])
def test_metadata_matches_the_documents(daemon, tmp_path, transport):
    cfg, where = corpus(tmp_path)
    n = 0
    for r in range(2):
        with Loader(cfg, socket=daemon.socket, dp_rank=r, dp_size=2, transport=transport) as loader:
            for batch in loader:
                assert batch["cu_seqlens"].dtype.name == "int32" if hasattr(batch["cu_seqlens"], "dtype") else True
                for line in lines_of(batch):
                    check(line, where)
                    n += 1
    assert n > 20


def key(line: Dict[str, Any]) -> str:
    return repr(sorted(line.items()))


def test_metadata_through_save_kill_and_resume(daemon_factory, tmp_path):
    cfg, where = corpus(tmp_path)
    d = daemon_factory()
    whole = Counter(key(line) for line in run(d.socket, cfg, 2))
    # Two ranks take 4 batches each and save; the daemon dies; three ranks
    # of a new daemon resume from the save and go to the end.
    folder = str(tmp_path / "ckpt")
    first = run(d.socket, cfg, 2, steps=4, save=folder)
    d.proc.kill()
    d.proc.wait()
    d2 = daemon_factory()
    rest = run(d2.socket, cfg, 3, resume=folder)
    resumed = Counter(key(line) for line in first + rest)
    assert resumed == whole, "a resumed run's lines or metadata differ from an uninterrupted run's"
    for line in first + rest:
        check(line, where)


def test_bad_metadata_is_refused_by_name(daemon, tmp_path):
    from dataloaderd import ConfigError
    cfg, _ = corpus(tmp_path)
    for edit, want in (({"metadata": ["segment_ids"]}, 'unknown field "segment_ids"'),
                       ({"metadata": ["loss_mask"], "positions": "continue"}, "positions applies to position_ids"),
                       ({"metadata": ["position_ids"], "positions": "absolute"}, 'positions: "absolute"')):
        with pytest.raises(ConfigError, match=want):
            with Loader({**cfg, **edit}, socket=daemon.socket, dp_rank=0, dp_size=1) as loader:
                next(iter(loader))


def test_padding_batches_say_they_are_padding(daemon, tmp_path):
    # end="pad": after the rank's last batch, batches of pad_id whose
    # metadata says so (one padding segment a line, nothing to learn).
    cfg, _ = corpus(tmp_path)
    seq = cfg["seq_len"]
    with Loader(cfg, socket=daemon.socket, dp_rank=0, dp_size=1, end="pad") as loader:
        for batch in loader:
            if batch["padding"]:
                break
    lines = batch["lines"]
    assert (np.asarray(batch["document_ids"]) == -1).all() and (np.asarray(batch["position_ids"]) == 0).all()
    assert not np.asarray(batch["loss_mask"]).any()
    assert (np.asarray(batch["dataset_ids"]) == -1).all()
    assert np.asarray(batch["cu_seqlens"]).tolist() == [b * seq for b in range(lines + 1)]
    assert np.asarray(batch["line_segments"]).tolist() == list(range(lines + 1)) and batch["max_seqlen"] == seq
