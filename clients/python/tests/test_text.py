"""Text datasets tokenized on the fly by the daemon, end to end: JSONL plain
and gzip with a real tokenizer (r50k_base, rank file from a registry package),
two ranks save, three resume to the end of the epoch; every document's tokens,
as the reference tiktoken makes them, are served exactly once."""

import collections
import gzip
import json
import os
import random

import numpy as np
import pytest

from dataloaderd import ConfigError, Loader, StateError

VOCAB = os.environ.get("DATALOADERD_TOKENIZER_VOCAB", "")
EOS = 50256  # <|endoftext|> in r50k_base

needs_vocab = pytest.mark.skipif(
    not os.path.exists(os.path.join(VOCAB, "r50k_base.tiktoken")) and os.environ.get("CI") != "true",
    reason="set DATALOADERD_TOKENIZER_VOCAB (make test does) to the rank files")


def reference():
    import tiktoken
    import tiktoken_ext.openai_public as openai_public
    from tiktoken.load import load_tiktoken_bpe

    def local(url, expected_hash=None):
        return load_tiktoken_bpe(os.path.join(VOCAB, url.rsplit("/", 1)[1]), expected_hash)

    openai_public.load_tiktoken_bpe = local
    d = openai_public.ENCODING_CONSTRUCTORS["r50k_base"]()
    return tiktoken.Encoding(d["name"], pat_str=d["pat_str"], mergeable_ranks=d["mergeable_ranks"],
                             special_tokens=d["special_tokens"])


def documents(seed, n):
    rng = random.Random(seed)
    words = ["the", "loader", "ранг", "데이터", "token", "ε", "42", "   ", "\n", "é", "🙂", "x" * 30, "don't", "1234567"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 300))) for _ in range(n)]


def write(path, docs, gz=False):
    lines = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(lines)


def run(loader, steps=None):
    out = collections.Counter()
    for n, batch in enumerate(loader, 1):
        out.update(batch["tokens"].ravel().tolist())
        if steps is not None and n == steps:
            break
    return out


@needs_vocab
def test_jsonl_on_the_fly_exactly_once_through_rescale(daemon_factory, tmp_path):
    d = daemon_factory("--tokenizer-dir", VOCAB)
    a, b = documents(1, 150), documents(2, 80)
    write(tmp_path / "a.jsonl", a)
    os.mkdir(tmp_path / "b")
    for i in range(8):  # a compressed file is one unit: 8 of them for 6 shards
        write(tmp_path / "b" / f"part{i}.jsonl.gz", b[10 * i:10 * i + 10], gz=True)
    config = {"seq_len": 127, "batch_size": 2, "seed": 5, "logical_shards": 6, "eos_id": EOS, "pad_id": 0,
              "epochs": 1,
              "datasets": [{"name": "a", "path": str(tmp_path / "a.jsonl"), "format": "jsonl", "tokenizer": "r50k_base", "weight": 2},
                           {"name": "b", "path": str(tmp_path / "b"), "format": "jsonl", "tokenizer": "r50k_base"}]}
    enc = reference()
    want = collections.Counter()
    for doc in a + b:
        ids = enc.encode_ordinary(doc)
        want.update(ids + ([EOS] if not ids or ids[-1] != EOS else []))

    served = collections.Counter()
    ckpt = str(tmp_path / "ckpt")
    for r in range(2):
        with Loader(config, dp_rank=r, dp_size=2, socket=d.socket, job="a") as ld:
            served += run(ld, steps=5 + r)
            ld.save(ckpt)
    for r in range(3):
        with Loader(config, dp_rank=r, dp_size=3, socket=d.socket, job="b", resume_from=ckpt) as ld:
            served += run(ld)
    served.pop(0, None)  # padding of the shards' last lines
    assert served == want, (f"{sum((served - want).values())} tokens too many, "
                            f"{sum((want - served).values())} missing")


@needs_vocab
def test_text_dataset_errors(daemon_factory, tmp_path):
    d = daemon_factory("--tokenizer-dir", VOCAB)
    write(tmp_path / "a.jsonl", documents(3, 20))
    base = {"seq_len": 31, "batch_size": 1, "logical_shards": 1, "eos_id": EOS, "epochs": 1}
    ds = {"name": "a", "path": str(tmp_path / "a.jsonl"), "format": "jsonl"}
    with pytest.raises(ConfigError, match="needs a tokenizer"):
        next(iter(Loader({**base, "datasets": [ds]}, socket=d.socket, dp_rank=0, dp_size=1)))
    with pytest.raises(ConfigError, match="unknown encoding|known"):
        next(iter(Loader({**base, "datasets": [{**ds, "tokenizer": "r51k_base"}]}, socket=d.socket, dp_rank=0, dp_size=1)))
    # A state saved with one tokenizer is refused under another.
    with Loader({**base, "datasets": [{**ds, "tokenizer": "r50k_base"}]}, socket=d.socket, dp_rank=0, dp_size=1, job="s") as ld:
        next(iter(ld))
        ld.save(str(tmp_path / "ck"))
    with pytest.raises(StateError, match="tokenizer is \"r50k_base\" in the saved state, \"p50k_base\" now"):
        next(iter(Loader({**base, "datasets": [{**ds, "tokenizer": "p50k_base"}]}, socket=d.socket, dp_rank=0,
                         dp_size=1, job="t", resume_from=str(tmp_path / "ck"))))


@needs_vocab
def test_prepare_matches_tiktoken_and_resumes(tmp_path):
    # `dataloaderd prepare` writes Megatron datasets whose documents are the
    # reference tokenizer's ids; a second run skips the finished files.
    import subprocess

    from rundaemon import BIN
    src = tmp_path / "in"
    src.mkdir()
    docs = {f"part{i}": documents(10 + i, 120) for i in range(3)}
    for name, ds in docs.items():
        write(src / f"{name}.jsonl.gz" if name == "part1" else src / f"{name}.jsonl", ds, gz=name == "part1")
    out = tmp_path / "out"
    cmd = [BIN, "prepare", "--input", str(src), "--format", "jsonl", "--tokenizer", "r50k_base",
           "--tokenizer-dir", VOCAB, "--output", str(out), "--workers", "2", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "files: 3 written" in p.stdout and "documents: 360" in p.stdout, p.stdout
    enc = reference()
    for name, ds in docs.items():
        idx = (out / f"{name}.idx").read_bytes()
        n = int.from_bytes(idx[18:26], "little")
        assert idx[17] == 8 and n == len(ds), (name, idx[17], n)  # uint16, one sequence per document
        lengths = np.frombuffer(idx, dtype="<i4", count=n, offset=34)
        tokens = np.fromfile(out / f"{name}.bin", dtype="<u2")
        at = 0
        for doc, length in zip(ds, lengths):
            assert tokens[at:at + length].tolist() == enc.encode_ordinary(doc), name
            at += length
    (out / "part2.idx").unlink()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "files: 1 written, 2 already done" in p.stdout, p.stdout + p.stderr


@needs_vocab
def test_prepare_records_the_tokenizer_and_refuses_another(tmp_path):
    # Each output has a record of its tokenizer; a run into the same folder
    # with another table is refused, naming the file and both tokenizers, a
    # name of the same table (gpt2 for r50k_base) skips, --force redoes.
    import hashlib
    import subprocess

    from conftest import BIN
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    for i in range(2):
        write(src / f"part{i}.jsonl", documents(30 + i, 20))

    def prepare(tokenizer, *extra):
        cmd = [BIN, "prepare", "--input", str(src), "--format", "jsonl", "--tokenizer", tokenizer,
               "--tokenizer-dir", VOCAB, "--output", str(out), "--workers", "2", "--quiet", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    p = prepare("r50k_base", "--append-eos", str(EOS))
    assert p.returncode == 0 and "files: 2 written" in p.stdout, p.stdout + p.stderr
    with open(os.path.join(VOCAB, "r50k_base.tiktoken"), "rb") as f:
        r50k = hashlib.sha256(f.read()).hexdigest()
    record = json.loads((out / "part0.prepare.json").read_text())
    assert record["tokenizer"] == "r50k_base" and record["tokenizer_sha256"] == r50k, record
    assert record["format"] == "jsonl" and record["field"] == "text" and record["append_eos"] == EOS, record

    p = prepare("p50k_base", "--append-eos", str(EOS))
    assert p.returncode == 1, p.stdout + p.stderr
    for want in (f"{out / 'part0'}.{{bin,idx}} was made with tokenizer r50k_base (sha256 {r50k[:12]}",
                 "this run asks for tokenizer p50k_base", "and 1 more", "--force"):
        assert want in p.stderr, (want, p.stderr)
    p = prepare("r50k_base")
    assert p.returncode == 1 and "no EOS appended" in p.stderr, p.stdout + p.stderr
    p = prepare("gpt2", "--append-eos", str(EOS))
    assert p.returncode == 0 and "files: 0 written, 2 already done" in p.stdout, p.stdout + p.stderr
    p = prepare("p50k_base", "--append-eos", str(EOS), "--force")
    assert p.returncode == 0 and "files: 2 written" in p.stdout and "redone (--force): 2" in p.stdout, p.stdout + p.stderr
    assert json.loads((out / "part1.prepare.json").read_text())["tokenizer"] == "p50k_base"
