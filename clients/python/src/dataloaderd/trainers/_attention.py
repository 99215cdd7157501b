"""Whether a Hugging Face model keeps packed documents apart: a probe of two
documents packed in one line, positions restarting at the second, against
the second alone (docs/metadata.md, "Hugging Face models and packed
lines"). transformers 5 isolates them only when the model builds its mask
with create_causal_mask, is given ``position_ids``, no ``attention_mask`` and
no cache: with the default ``use_cache`` the second document attends to the
first, silently."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import torch

from ..errors import AttentionLeakError

__all__ = ["Leak", "check_packed_attention"]

Leak = Literal["raise", "warn", "ignore"]

FIRST, SECOND = 8, 6  # the probe's documents' lengths


def _vocab(model: Any) -> int:
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if not isinstance(size, int):
        size = int(model.get_input_embeddings().num_embeddings)
    return size


def _logits(model: Any, ids: torch.Tensor, positions: torch.Tensor, forward: Any) -> torch.Tensor:
    return model(input_ids=ids, position_ids=positions, **forward).logits.float()


def check_packed_attention(model: Any, *, on_leak: Leak = "raise", tolerance: float = 1e-2, **forward: Any) -> float:
    """Runs ``model`` (a Hugging Face causal LM) on two documents packed in
    one line, ``position_ids`` restarting at 0 where the second begins, and
    on the second alone; ``forward`` are the other keyword arguments the
    trainer passes (``use_cache=False`` as hf_inputs does). Returns the
    largest change of the second document's logits. When it is more than
    ``tolerance`` times the largest logit (at least 1), the model lets a
    document attend to the one before it: AttentionLeakError with
    ``on_leak="raise"``, a RuntimeWarning with ``"warn"``. Two forward passes
    of 14 tokens, in eval mode and without gradients; every rank of a
    sharded model must call it together."""
    vocab = _vocab(model)
    device = next(model.parameters()).device
    ids = (torch.arange(FIRST + SECOND, device=device) * 7 + 3) % vocab
    positions = torch.cat([torch.arange(FIRST, device=device), torch.arange(SECOND, device=device)])
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = _logits(model, ids[None], positions[None], forward)[0, FIRST:]
            alone = _logits(model, ids[None, FIRST:], positions[None, FIRST:], forward)[0]
    finally:
        model.train(training)
    moved = float((packed - alone).abs().max())
    scale = max(1.0, float(alone.abs().max()))
    if moved > tolerance * scale and on_leak != "ignore":
        impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
        message = (
            f"{type(model).__name__} (attention {impl!r}) lets packed documents attend to each other: given two "
            f"documents in one line with position_ids restarting at the second, and {forward or 'no other arguments'}, "
            f"the second one's logits moved by {moved:.3g} from those of it alone (more than {tolerance:g} x "
            f"{scale:.3g}). Pass position_ids, use_cache=False and no attention_mask to a model whose masks honour "
            "them (transformers' create_causal_mask: Llama, Mistral, Qwen2, ...; flash_attention_2 takes them as "
            "varlen), or mask attention by document_ids yourself (docs/metadata.md)")
        if on_leak == "raise":
            raise AttentionLeakError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return moved
