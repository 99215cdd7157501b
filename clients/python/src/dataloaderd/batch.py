"""The batches a Loader yields, and how they are made from a slot's tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, TypedDict, Union, cast

import numpy as np
import numpy.typing as npt

from ._torchapi import Tensor, Torch

if TYPE_CHECKING:  # torch is optional; a type checker without it sees Any
    import torch

__all__ = ["Batch", "DTYPES", "make_batch", "all_padding"]

# What Loader(dtype=...) takes: the integer type of input_ids, labels and
# shift_labels. int64 is what losses and Hugging Face models take; int32 is
# the ring's own, served as zero-copy views.
DTYPES = ("int64", "int32")


class Batch(TypedDict):
    """One step's lines, indexed as a dict: ``batch["input_ids"]``.

    ``tokens`` is the int32 array ``[lines, seq_len + 1]`` of the lines as
    the daemon wrote them: a read-only numpy view of shared memory on
    ``shm`` (valid until the next batch is asked for), a numpy array on
    ``inline``, a device tensor on ``cuda`` and ``shm-pinned``.

    ``input_ids`` is ``tokens[:, :-1]``. ``labels`` is ``input_ids`` again,
    as Hugging Face causal LMs take it (the model shifts labels by one to
    predict each next token, and ignores -100). ``shift_labels`` is
    ``tokens[:, 1:]``: each position's next token, already shifted, for
    trainers whose loss does not shift (and Hugging Face's own
    ``shift_labels=``, which then uses every position, the last one
    included). With the default ``dtype="int64"`` the three are torch
    tensors of their own (numpy arrays without torch), writable; with
    ``dtype="int32"`` they are zero-copy views of ``tokens`` (``labels`` is
    ``input_ids`` itself), copy-on-write on ``shm`` when torch is there.

    ``step`` counts from 1 over the whole run, resumes included; ``lines``
    is ``batch_size``, fewer only in the last batch of a bounded run.
    ``padding`` is True for the batches a loader with ``end="pad"`` yields
    after its rank's last one: every token is ``pad_id``, and the step must
    not count (multiply its loss by 0, still step with the others)."""

    tokens: Union[torch.Tensor, npt.NDArray[np.int32]]
    step: int
    lines: int
    input_ids: torch.Tensor
    labels: torch.Tensor
    shift_labels: torch.Tensor
    padding: bool


def _targets(tokens: Any, dtype: str) -> Tuple[Any, Any, Any]:
    """input_ids, labels and shift_labels of tokens, numpy or a tensor."""
    x, y = tokens[:, :-1], tokens[:, 1:]
    if dtype == "int32":
        return x, x, y
    if isinstance(tokens, np.ndarray):
        return x.astype(np.int64), x.astype(np.int64), y.astype(np.int64)
    return x.long(), x.long(), y.long()  # device tensors: new ones, on the same device


def _torch_of(a: Any, torch_mod: Optional[Torch]) -> Any:
    """A host array as a tensor when torch is there (read-only memory is
    copied: torch has no read-only tensors); device tensors as they are."""
    if isinstance(a, np.ndarray) and torch_mod is not None:
        return torch_mod.from_numpy(a if a.flags.writeable else a.copy())
    return a


def _metadata(arrays: Dict[str, Any], dtype: str, torch_mod: Optional[Torch], max_seqlen: int) -> Dict[str, Any]:
    """The batch keys of a slot's metadata arrays (docs/metadata.md)."""
    out: Dict[str, Any] = {}

    def ints(a: Any) -> Any:
        if dtype == "int64":
            a = a.astype(np.int64) if isinstance(a, np.ndarray) else a.long()
        return _torch_of(a, torch_mod)

    for name in ("position_ids", "document_ids"):  # the inputs' positions: [:, :-1], as input_ids
        if name in arrays:
            out[name] = ints(arrays[name][:, :-1])
    if "dataset_ids" in arrays:
        out["dataset_ids"] = ints(arrays["dataset_ids"])
    if "loss_mask" in arrays:
        m = arrays["loss_mask"]
        if isinstance(m, np.ndarray):
            out["loss_mask"] = _torch_of(m.view(np.bool_), torch_mod)
        else:
            out["loss_mask"] = m.view(torch_mod.bool) if torch_mod is not None else m
    if "cu_seqlens" in arrays:  # int32 whatever dtype says: flash-attn's varlen kernels take int32
        out["cu_seqlens"] = _torch_of(arrays["cu_seqlens"], torch_mod)
        out["line_segments"] = _torch_of(arrays["line_segments"], torch_mod)
        out["max_seqlen"] = max_seqlen
    return out


def padding_arrays(lines: int, seq_len: int, pad_id: int, metadata: Any) -> Dict[str, npt.NDArray[Any]]:
    """The arrays of a padding batch (end="pad"): every token pad_id, and
    metadata that says so: each line one padding segment."""
    out: Dict[str, npt.NDArray[Any]] = {"tokens": np.full((lines, seq_len + 1), pad_id, dtype=np.int32)}
    if "position_ids" in metadata:
        out["position_ids"] = np.zeros((lines, seq_len + 1), dtype=np.int32)
    if "document_ids" in metadata:
        out["document_ids"] = np.full((lines, seq_len + 1), -1, dtype=np.int32)
    if "loss_mask" in metadata:
        out["loss_mask"] = np.zeros((lines, seq_len), dtype=np.uint8)
    if "dataset_ids" in metadata:
        out["dataset_ids"] = np.full((lines,), -1, dtype=np.int32)
    if "cu_seqlens" in metadata:
        out["cu_seqlens"] = np.arange(lines + 1, dtype=np.int32) * seq_len
        out["line_segments"] = np.arange(lines + 1, dtype=np.int32)
    return out


def make_batch(tokens: Union[Tensor, npt.NDArray[np.int32]], step: int, dtype: str,
               torch_mod: Optional[Torch], padding: bool = False, metadata: Optional[Dict[str, Any]] = None,
               max_seqlen: int = 0) -> Batch:
    """A Batch of a slot's tokens (or of a padding batch's), with the
    metadata arrays of its slot, if any."""
    ids, labels, shifted = _targets(tokens, dtype)
    if isinstance(tokens, np.ndarray) and torch_mod is not None:
        # Fresh int64 arrays, or int32 views of writable (copy-on-write)
        # memory: torch warns of neither. Read-only ones left (int32 views of
        # an inline message) are copied: torch has no read-only tensors.
        ids, labels, shifted = (_torch_of(a, torch_mod) for a in (ids, labels, shifted))
        if tokens.flags.writeable and not tokens.flags.owndata:
            tokens = tokens.view()  # the copy-on-write view: tokens itself stays read-only,
            tokens.flags.writeable = False  # as on every other path but copy=True
    batch = {"tokens": tokens, "step": step, "lines": tokens.shape[0],
             "input_ids": ids, "labels": labels, "shift_labels": shifted, "padding": padding}
    if metadata:
        batch.update(_metadata(metadata, dtype, torch_mod, max_seqlen))
    return cast(Batch, batch)


def all_padding(batch: Batch, group: Any = None) -> bool:
    """Whether every rank of the trainer's process group got a padding batch
    at this step (loaders with ``end="pad"``): the rank-wide end of an epoch.
    Call it at every step on every rank and stop when it is True; before,
    step on padding batches with their loss multiplied by 0, so that every
    rank takes the same steps (DDP's collectives match).

    This is the trainer's own communication, on its own process group: one
    all-reduce of one integer a step. The loader adds none."""
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else None
    flag = torch.tensor([1 if batch["padding"] else 0], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())
