"""A training step whose attention is masked by document, from the batch's
metadata: no token attends across a document boundary, positions count
within each document, and the loss skips padding and, with
``mask_document_boundaries``, the prediction of a document's first token
from the one before it.

The job config asks for the metadata (README, "Document metadata")::

    metadata: [position_ids, document_ids, loss_mask]
    mask_document_boundaries: true

Here attention is PyTorch's scaled_dot_product_attention with a boolean
mask built from ``document_ids`` (runs anywhere, CPU included). On a GPU with
flash-attn, the same batch drives the varlen kernel without a mask: pass
``cu_seqlens`` and ``max_seqlen`` (add ``cu_seqlens`` to ``metadata``) to
``flash_attn_varlen_func`` over the inputs flattened to one sequence.

    torchrun --nproc-per-node 2 examples/document_masking.py config.yaml [--vocab N] [--steps N]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """[lines, 1, seq, seq] boolean attention mask: query i sees key j when
    j <= i and both are tokens of the same document. Padding (id -1 in every
    line) is one run of equal ids, so a padding query sees the padding before
    it in its line and itself, never a document; the loss masks its
    predictions. Every query sees at least itself, so no row is empty."""
    seq = document_ids.shape[1]
    same = document_ids[:, :, None] == document_ids[:, None, :]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=document_ids.device).tril()
    own = torch.eye(seq, dtype=torch.bool, device=document_ids.device)
    return ((same & causal) | own)[:, None]


class TinyLM(nn.Module):
    """One attention block over learned position embeddings: enough to show
    what the mask and positions do."""

    def __init__(self, vocab: int, max_pos: int, dim: int = 32, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_pos, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        # positions: continue gives a long document's later lines positions
        # past seq_len; a learned table has to stop somewhere (RoPE need not).
        x = self.tok(input_ids) + self.pos(position_ids.clamp(max=self.pos.num_embeddings - 1))
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return self.head(x)


def masked_loss(model: nn.Module, batch) -> torch.Tensor:
    """The next-token loss of a batch, attention masked by document, averaged
    over the positions loss_mask keeps."""
    logits = model(batch["input_ids"], batch["position_ids"], document_mask(batch["document_ids"]))
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), batch["shift_labels"].flatten(), reduction="none")
    keep = batch["loss_mask"].flatten().float()
    return (per_token * keep).sum() / keep.sum().clamp(min=1)


def main() -> None:
    import argparse

    import torch.distributed as dist

    from dataloaderd import Loader

    ap = argparse.ArgumentParser(description="a training step masked by document")
    ap.add_argument("config")
    ap.add_argument("--vocab", type=int, default=1 << 17, help="more than the largest token id")
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    config, steps = a.config, a.steps
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(TinyLM(vocab=a.vocab, max_pos=1 << 12))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with Loader(config) as loader:
        for batch in loader:
            loss = masked_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if dist.get_rank() == 0 and batch["step"] % 10 == 0:
                print(f"step {batch['step']}: loss {loss.item():.4f}", flush=True)
            if batch["step"] == steps:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
