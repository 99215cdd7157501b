"""examples/document_masking.py with real torch: the loss of a batch whose
attention is masked by its document_ids, at its position_ids, equals the
loss of a reference that runs every document of every line on its own, so
the metadata masks what it must (not merely something)."""

import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from corpus import unique_docs, write_megatron
from dataloaderd import Loader
from rundaemon import Daemon

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
from document_masking import TinyLM, masked_loss  # noqa: E402


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


def per_document_loss(model, batch):
    """Each line cut at its document_ids into documents, each run through the
    model alone (plain causal attention) at its own position_ids."""
    total, kept = torch.zeros(()), torch.zeros(())
    for b in range(batch["lines"]):
        doc = batch["document_ids"][b]
        bounds = [0] + [k for k in range(1, len(doc)) if doc[k] != doc[k - 1]] + [len(doc)]
        for lo, hi in zip(bounds, bounds[1:]):
            ids = batch["input_ids"][b:b + 1, lo:hi]
            logits = model(ids, batch["position_ids"][b:b + 1, lo:hi])
            per = F.cross_entropy(logits[0].float(), batch["shift_labels"][b, lo:hi], reduction="none")
            keep = batch["loss_mask"][b, lo:hi].float()
            total, kept = total + (per * keep).sum(), kept + keep.sum()
    return total / kept.clamp(min=1)


@pytest.mark.parametrize("positions", ["restart", "continue"])
def test_masked_loss_equals_documents_run_alone(daemon, tmp_path, positions):
    rng = np.random.default_rng(1)
    docs, end = unique_docs(rng, 80, 20, 1)  # many documents per line, some continued from the line before
    prefix = write_megatron(os.path.join(tmp_path, "d"), docs)
    config = {"seq_len": 47, "batch_size": 4, "logical_shards": 2, "eos_id": 0, "pad_id": end, "epochs": 1,
              "datasets": [{"name": "d", "path": prefix, "format": "megatron"}],
              "metadata": ["position_ids", "document_ids", "loss_mask"], "positions": positions,
              "mask_document_boundaries": True}
    torch.manual_seed(0)
    model = TinyLM(vocab=end + 1, max_pos=512).eval()
    checked = 0
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1) as loader, torch.no_grad():
        for batch in loader:
            segments = int((batch["document_ids"][:, 1:] != batch["document_ids"][:, :-1]).sum())
            assert segments > batch["lines"], "a line of one document checks no masking"
            masked = masked_loss(model, batch)
            alone = per_document_loss(model, batch)
            assert torch.allclose(masked, alone, atol=1e-5), (masked, alone)
            # Without the mask, attention crosses documents: another loss.
            logits = model(batch["input_ids"], batch["position_ids"])
            plain = F.cross_entropy(logits.flatten(0, 1), batch["shift_labels"].flatten(), reduction="none")
            keep = batch["loss_mask"].flatten().float()
            assert not torch.allclose((plain * keep).sum() / keep.sum(), alone, atol=1e-5)
            checked += 1
            if checked == 5:
                break
    assert checked == 5
