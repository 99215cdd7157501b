"""Blocklists through the real daemon (docs/blocklists.md): documents named in
the config are never served from the step the blocklist arrives at, every
other token exactly once, through a DCP-style state dict and a 2 -> 3
rescale; what was served before is reported; bad entries are refused."""

import collections
import hashlib
import json
import os
import subprocess

import numpy as np
import pytest

import dataloaderd
from dataloaderd import ConfigError, Loader

from corpus import make_corpus, unique_docs
from rundaemon import BIN
from test_text import EOS, VOCAB, documents, needs_vocab, reference, write

PAD = 1_000_000


def world_corpus(tmp_path):
    datasets, _ = make_corpus(str(tmp_path), seed=3)
    rng = np.random.default_rng(3)
    docs = {}
    first = 1
    for i, (n, max_len) in enumerate(((120, 60), (80, 40))):
        docs[f"d{i}"], first = unique_docs(rng, n, max_len, first)
    return datasets, docs


def lines(loader, steps=None):
    """Each batch's tokens and document ids, as numpy arrays."""
    out = []
    for n, batch in enumerate(loader, 1):
        out.append((np.array(batch["tokens"]), np.array(batch["document_ids"]), np.array(batch["loss_mask"])))
        if steps is not None and n == steps:
            break
    return out


def test_blocklist_added_at_a_resume_through_dcp_and_rescale(daemon, tmp_path):
    datasets, docs = world_corpus(tmp_path)
    config = {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 6, "eos_id": 0, "pad_id": PAD,
              "epochs": 1, "datasets": datasets, "metadata": ["document_ids", "loss_mask"]}
    doc_of = {int(t): (name, i) for name, ds in docs.items() for i, d in enumerate(ds) for t in d}
    blocked = {("d0", i) for i in range(0, 120, 7)} | {("d1", i) for i in range(3, 80, 5)}
    listed = tmp_path / "blocked.jsonl"
    listed.write_text("".join(json.dumps({"dataset": "d1", "document": i}) + "\n" for (n, i) in sorted(blocked) if n == "d1"))
    blocklist = {"documents": [{"dataset": "d0", "document": i} for (n, i) in sorted(blocked) if n == "d0"],
                 "files": [str(listed)]}

    before, after = collections.Counter(), collections.Counter()
    pool, runs = {}, set()
    for r in range(2):
        with Loader(config, dp_rank=r, dp_size=2, socket=daemon.socket, job="old") as ld:
            for toks, _, _ in lines(ld, steps=5):
                before.update(toks.ravel().tolist())
            sd = ld.state_dict()
        runs.add(sd["run"])
        for d, shards in sd["shards"].items():
            for k, v in shards.items():
                pool[(d, k)] = np.asarray(v)
    ckpt = str(tmp_path / "ckpt")
    for r in range(3):
        with Loader({**config, "blocklist": blocklist}, dp_rank=r, dp_size=3, socket=daemon.socket, job="new") as ld:
            template = ld.state_dict()
            ld.load_state_dict({"version": 2, "run": next(iter(runs)),
                                "shards": {d: {k: pool[(d, k)] for k in ks} for d, ks in template["shards"].items()}})
            for toks, doc_ids, loss in lines(ld):
                after.update(toks.ravel().tolist())
                assert ((doc_ids == -1) == (toks[:, :-1] == PAD)).all(), "padding and document ids -1 differ"
                padded = (toks[:, :-1] == PAD) | (toks[:, 1:] == PAD)
                assert not (loss.astype(bool) & padded).any(), "loss on a blocked document's padding"
            ld.save(ckpt)
    for tok in set(doc_of):
        ref = doc_of[tok]
        if ref in blocked:
            assert after[tok] == 0, f"token {tok} of blocked {ref} served after the blocklist arrived"
        else:
            assert before[tok] + after[tok] == 1, f"token {tok} of {ref} served {before[tok]}+{after[tok]} times"

    # Each blocked document served before the blocklist is reported, once.
    logs = daemon.logs()
    warned = {(r["dataset"], r["document"]) for r in map(json.loads, filter(None, logs.splitlines()))
              if r.get("msg") == "blocked document was served before the blocklist arrived"}
    served_before = {doc_of[t] for t in before if t in doc_of and doc_of[t] in blocked}
    assert served_before and served_before <= warned <= blocked, (served_before, warned)
    out = subprocess.run([BIN, "inspect", ckpt], capture_output=True, text=True, check=True).stdout
    assert "from step 6: blocklist " in out and f"{len(blocked)} document(s)" in out, out


@needs_vocab
def test_text_blocked_by_hash_and_line_from_the_start(daemon_factory, tmp_path):
    d = daemon_factory("--tokenizer-dir", VOCAB)
    docs = documents(7, 120)
    write(tmp_path / "a.jsonl", docs)
    entries = [{"dataset": "a", "sha256": hashlib.sha256(docs[i].encode()).hexdigest()} if i % 12 else
               {"dataset": "a", "file": "a.jsonl", "line": i + 1} for i in range(0, len(docs), 6)]
    config = {"seq_len": 63, "batch_size": 2, "seed": 1, "logical_shards": 2, "eos_id": EOS, "pad_id": 60000,
              "epochs": 1, "blocklist": {"documents": entries},
              "datasets": [{"name": "a", "path": str(tmp_path / "a.jsonl"), "format": "jsonl", "tokenizer": "r50k_base"}]}
    enc = reference()
    want = collections.Counter()
    for i, doc in enumerate(docs):
        if i % 6 != 0:
            ids = enc.encode_ordinary(doc)
            want.update(ids + ([EOS] if not ids or ids[-1] != EOS else []))
    served = collections.Counter()
    for r in range(2):
        with Loader(config, dp_rank=r, dp_size=2, socket=d.socket, job="h") as ld:
            for batch in ld:
                served.update(np.array(batch["tokens"]).ravel().tolist())
    served.pop(60000, None)
    assert served == want, (f"{sum((served - want).values())} tokens too many, "
                            f"{sum((want - served).values())} missing")


def test_bad_blocklists_are_refused_by_name(daemon, tmp_path, config):
    def refused(blocklist, match):
        with pytest.raises(ConfigError, match=match):
            next(iter(Loader({**config, "blocklist": blocklist}, dp_rank=0, dp_size=1, socket=daemon.socket)))

    refused({"documents": [{"dataset": "nope", "document": 1}]}, r'blocklist.documents\[0\]: unknown dataset "nope"')
    refused({"documents": [{"dataset": "d0", "document": 10**9}]}, "document 1000000000 is out of range")
    refused({"documents": [{"dataset": "d0", "sha256": "ab"}]}, "sha256 names text")
    refused({"files": [str(tmp_path / "missing.jsonl")]}, "blocklist file .*missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"dataset": "d0", "document": "one"}\n')
    refused({"files": [str(tmp_path / "bad.jsonl")]}, 'blocklist file .*bad.jsonl" line 1')
    refused({"documnets": []}, "blocklist: unknown key 'documnets'")
    refused({"documents": [{"dataset": "d0", "document": -1}]}, "'document' must not be negative")
    refused({"documents": [{"dataset": "d0", "file": "d0.bin", "line": 3}]}, "line and row name text documents")


def test_explain_marks_blocked_documents(tmp_path):
    datasets, docs = world_corpus(tmp_path)
    blocked = {("d0", i) for i in range(0, 120, 3)}
    config = {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 6, "eos_id": 0, "pad_id": PAD,
              "datasets": datasets, "blocklist": {"documents": [{"dataset": n, "document": i} for n, i in sorted(blocked)]}}
    rows = dataloaderd.explain(config, steps=(1, 20), dp_size=2)
    assert any(r.get("blocked") for r in rows) and not all(r.get("blocked") for r in rows)
    for r in rows:
        assert bool(r.get("blocked")) == ((r["dataset"], r["unit"]) in blocked), r


def test_blocklist_and_skip_range_at_one_resume_then_rescale(daemon, tmp_path):
    # A world of 2 saves at step 5; 3 ranks resume with a blocklist and a
    # skip range (steps 8 to 10), save at step 12 (the state logs both) and
    # 2 ranks read on to the end: no blocked token and no token of the
    # range after the resume, every other token exactly once; the range's
    # batches are those a run without the skip had (blocked tokens padded).
    datasets, docs = world_corpus(tmp_path)
    config = {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 6, "eos_id": 0, "pad_id": PAD,
              "epochs": 1, "datasets": datasets}
    doc_of = {int(t): (name, i) for name, ds in docs.items() for i, d in enumerate(ds) for t in d}
    blocked = {("d0", i) for i in range(2, 120, 9)} | {("d1", i) for i in range(1, 80, 6)}
    blocklist = {"documents": [{"dataset": n, "document": i} for n, i in sorted(blocked)]}
    later = {**config, "blocklist": blocklist, "skip_steps": [[8, 10]]}
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    before, after = collections.Counter(), collections.Counter()
    for r in range(2):
        with Loader(config, dp_rank=r, dp_size=2, socket=daemon.socket, job="a") as ld:
            for toks, in ((np.array(x["tokens"]),) for _, x in zip(range(5), ld)):
                before.update(toks.ravel().tolist())
            ld.save(a)
    skipped = collections.Counter()
    for r in range(3):
        with Loader({**config, "blocklist": blocklist}, dp_rank=r, dp_size=3, socket=daemon.socket, job="ref",
                    resume_from=a) as ref:
            want = {int(x["step"]): np.array(x["tokens"]) for _, x in zip(range(7), ref)}  # steps 6 to 12
        for s in (8, 9, 10):
            skipped.update(want[s].ravel().tolist())
        with Loader(later, dp_rank=r, dp_size=3, socket=daemon.socket, job="b", resume_from=a) as ld:
            got = {int(x["step"]): np.array(x["tokens"]) for _, x in zip(range(4), ld)}
            assert sorted(got) == [6, 7, 11, 12], f"rank {r}: steps {sorted(got)}"
            for s, toks in got.items():
                assert np.array_equal(toks, want[s]), f"rank {r} step {s} is not the run's without the skip"
                after.update(toks.ravel().tolist())
            ld.save(b)
    shown = json.loads(subprocess.run([BIN, "inspect", "--json", b], capture_output=True, text=True, check=True).stdout)
    assert shown["skips"] == [{"first": 8, "last": 10, "steps": 3, "status": "skipped"}], shown["skips"]
    assert [x["step"] + 1 for x in shown["blocklists"]] == [6], shown["blocklists"]
    for r in range(2):
        with Loader(later, dp_rank=r, dp_size=2, socket=daemon.socket, job="c", resume_from=b) as ld:
            for x in ld:
                after.update(np.array(x["tokens"]).ravel().tolist())
    for tok, ref in doc_of.items():
        if ref in blocked:
            assert after[tok] == 0 and skipped[tok] == 0, f"token {tok} of blocked {ref} served after the resume"
        else:
            n = before[tok] + after[tok] + skipped[tok]
            assert n == 1 and not (after[tok] and skipped[tok]), f"token {tok} of {ref}: {before[tok]}+{after[tok]} served, {skipped[tok]} skipped"
