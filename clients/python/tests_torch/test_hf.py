"""Batches as Hugging Face causal LMs take them, checked with the real
transformers package and a tiny model made here (nothing downloaded); and
batches that no write can crash, with real torch."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from rundaemon import Daemon
from corpus import make_corpus
from dataloaderd import Loader


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def config(tmp_path):
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 8, "eos_id": 0, "datasets": datasets}


def tiny_model(vocab, seq_len):
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=seq_len, n_embd=32, n_layer=1, n_head=2)).eval()


def test_hugging_face_learns_the_next_token(daemon, config):
    # The README's call, model(input_ids, labels=labels), is the next-token
    # loss (what the issue measured was the loss of the token after next);
    # with shift_labels every position is predicted, the last one included.
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket) as loader:
        batch = next(iter(loader))
    tokens = torch.from_numpy(np.array(batch["tokens"])).long()
    assert batch["input_ids"].dtype == batch["labels"].dtype == batch["shift_labels"].dtype == torch.int64
    model = tiny_model(int(tokens.max()) + 1, config["seq_len"])
    with torch.no_grad():
        out = model(batch["input_ids"], labels=batch["labels"])
        logits = out.logits
        next_token = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:-1].flatten())
        skip_one = F.cross_entropy(logits[:, :-2].flatten(0, 1), tokens[:, 2:-1].flatten())
        every = model(batch["input_ids"], labels=batch["labels"], shift_labels=batch["shift_labels"]).loss
    assert torch.allclose(out.loss, next_token) and not torch.allclose(out.loss, skip_one)
    assert torch.allclose(every, F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()))
    with pytest.raises(RuntimeError):  # why int64 is the default: the loss takes no int32 targets
        model(batch["input_ids"], labels=batch["labels"].int())


def test_writes_into_batches_never_crash(daemon, config):
    # In a process of its own: a write into read-only shared memory would
    # kill it with SIGSEGV rather than fail the test.
    script = textwrap.dedent(f"""
        import numpy as np
        from dataloaderd import Loader
        for dtype in ("int64", "int32"):
            with Loader({config!r}, dp_rank=0, dp_size=1, socket={daemon.socket!r}, job="w" + dtype,
                        dtype=dtype) as loader:
                it = iter(loader)
                batch = next(it)
                first = np.array(batch["tokens"])
                batch["labels"][batch["labels"] == 0] = -100
                batch["shift_labels"][:, 0] = -100
                try:
                    batch["tokens"][0, 0] = 1
                    raise SystemExit("a write into tokens on shm did not raise")
                except ValueError as e:
                    assert "read-only" in str(e)
                if dtype == "int64":
                    assert (batch["input_ids"].numpy() == first[:, :-1]).all(), "labels share input_ids' memory"
                later = [np.array(next(it)["tokens"]) for _ in range(20)]
                assert not any((b == -100).any() for b in later), "a write reached a later batch"
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr[-2000:])
