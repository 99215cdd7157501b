"""The batches a Loader yields, and how they are made from a slot's tokens."""

# No ``from __future__ import annotations`` here: Batch's NotRequired keys must
# be seen at run time too (Batch.__required_keys__); torch's names are quoted.
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Tuple, TypedDict, Union, cast

import numpy as np
import numpy.typing as npt

from . import _cuda
from ._feed import Announced, Held
from ._slot import Layout
from ._torchapi import Tensor, Torch

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - typing_extensions comes with grpcio (>= 1.85: typing-extensions~=4.12)
    from typing_extensions import NotRequired

if TYPE_CHECKING:  # torch is optional; a type checker without it sees Any
    import torch

__all__ = ["Batch", "Buffers", "DType", "DTYPES", "make_batch", "all_padding", "padding_arrays", "batch_id"]

# What Loader(dtype=...) takes: the integer type of input_ids, labels and
# shift_labels. int64 is what losses and Hugging Face models take; int32 is
# the ring's own, served as zero-copy views.
DType = Literal["int64", "int32"]
DTYPES: Tuple[DType, ...] = ("int64", "int32")


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
    tensors (numpy arrays without torch) of memory of their own, writable:
    the planes of one int64 array made by one conversion of ``tokens`` per
    batch. With ``dtype="int32"`` they are zero-copy views of ``tokens``
    (``labels`` is ``input_ids`` itself), copy-on-write on ``shm`` when
    torch is there.

    ``batch_id`` names the batch: the job's fingerprint (of its datasets,
    seq_len, batch_size, ...: what shapes the token stream), the step and
    the rank, as ``"3fa2c1d0-s41200-r3of8"``. Log it; ``dataloaderd explain
    --batch-id`` (and ``dataloaderd.explain``) say which documents made the
    batch. Empty from a daemon too old to give the fingerprint.

    ``step`` counts from 1 over the whole run, resumes included; ``lines``
    is ``batch_size``, fewer only in the last batch of a bounded run.
    ``padding`` is True for the batches a loader with ``end="pad"`` yields
    after its rank's last one: every token is ``pad_id``, and the step must
    not count (multiply its loss by 0, still step with the others).

    The other keys are there when the job config's ``metadata`` asks for
    them (docs/metadata.md): ``position_ids``, ``document_ids`` ``[lines,
    seq_len]`` and ``dataset_ids`` ``[lines]`` in the loader's ``dtype``;
    ``loss_mask`` bool ``[lines, seq_len]``; ``cu_seqlens`` int32
    ``[segments + 1]`` with ``line_segments`` int32 ``[lines + 1]`` and
    ``max_seqlen`` (a Python int)."""

    tokens: Union["torch.Tensor", npt.NDArray[np.int32]]
    step: int
    batch_id: str
    lines: int
    input_ids: "torch.Tensor"
    labels: "torch.Tensor"
    shift_labels: "torch.Tensor"
    padding: bool
    position_ids: NotRequired["torch.Tensor"]
    document_ids: NotRequired["torch.Tensor"]
    dataset_ids: NotRequired["torch.Tensor"]
    loss_mask: NotRequired["torch.Tensor"]
    cu_seqlens: NotRequired["torch.Tensor"]
    line_segments: NotRequired["torch.Tensor"]
    max_seqlen: NotRequired[int]


class Buffers:
    """The host int64 arrays of a session's batches, each reused once
    nothing but this pool references it (the batch, its keys and every view
    or tensor of them are gone): a fresh array per batch costs more in page
    faults than its conversion does. At most ``keep`` are pooled; past
    that, and for a shape not pooled, an array is new."""

    def __init__(self, keep: int = 4):
        self._arrays: List[npt.NDArray[np.int64]] = []
        self._free_refs: List[int] = []  # an array's reference count when only the pool holds it
        self._keep = keep

    def get(self, shape: Tuple[int, ...]) -> npt.NDArray[np.int64]:
        for i in range(len(self._arrays)):
            if self._arrays[i].shape == shape and sys.getrefcount(self._arrays[i]) == self._free_refs[i]:
                return self._arrays[i]
        if len(self._arrays) == self._keep:
            return np.empty(shape, dtype=np.int64)
        self._arrays.append(np.empty(shape, dtype=np.int64))
        self._free_refs.append(sys.getrefcount(self._arrays[-1]))  # counted as get() counts
        return self._arrays[-1]


def _pair(tokens: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """tokens [lines, width] read as [2, lines, width - 1]: the inputs, then
    the same lines one token on (a view; as_strided's, built by hand when
    tokens is contiguous: as_strided costs more than the conversion's
    call)."""
    lines, width = tokens.shape
    row, col = tokens.strides
    if tokens.flags.c_contiguous:
        return np.ndarray((2, lines, width - 1), tokens.dtype, tokens, 0, (col, row, col))
    return np.lib.stride_tricks.as_strided(tokens, (2, lines, width - 1), (col, row, col), writeable=False)


def _targets(tokens: Any, dtype: str, torch_mod: Optional[Torch], buffers: Optional[Buffers]) -> Tuple[Any, Any, Any]:
    """input_ids, labels and shift_labels of tokens, numpy or a tensor.

    int64: one conversion of the slot's tokens, read as [2, lines, seq_len]
    (the inputs, then the same lines one token on) into one int64 array
    [3, lines, seq_len] (of buffers when given) whose planes the three are:
    input_ids, shift_labels, and labels, input_ids' values copied (a write
    into one key reaches no other). Each is contiguous (losses .view(-1)
    them); on a host one from_numpy. On the GPU two kernels (the conversion
    and the labels' copy) into memory of torch's caching allocator.
    int32: zero-copy views of tokens, each a tensor of its own on a host
    (torch has no read-only tensors: see make_batch)."""
    if dtype == "int32":
        x, y = tokens[:, :-1], tokens[:, 1:]
        if isinstance(tokens, np.ndarray) and torch_mod is not None:
            return _torch_of(x, torch_mod), _torch_of(x, torch_mod), _torch_of(y, torch_mod)
        return x, x, y
    lines, width = tokens.shape
    if isinstance(tokens, np.ndarray):
        pair = _pair(tokens)
        shape = (3, lines, width - 1)
        wide = buffers.get(shape) if buffers is not None else np.empty(shape, dtype=np.int64)
        np.copyto(wide[:2], pair)  # the one conversion
        wide[2] = wide[0]
        planes = _torch_of(wide, torch_mod)
        return planes[0], planes[2], planes[1]
    row, col = tokens.stride()
    pair = tokens.as_strided((2, lines, width - 1), (col, row, col)).long().contiguous()
    return pair[0], pair[0].clone(), pair[1]


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


# What a padding batch's fields hold (end="pad"; docs/metadata.md: padding is
# its own segment, document id -1, positions 0, loss 0); None: pad_id; a
# field not named here, 0.
_PADDING = {"tokens": None, "position_ids": 0, "document_ids": -1, "loss_mask": 0, "dataset_ids": -1}


def padding_arrays(layout: Layout, pad_id: int, device: Optional[int] = None) -> Dict[str, Any]:
    """The arrays of a padding batch (end="pad") of a full batch's lines, in
    the session's slot layout (the daemon's fields): every token pad_id,
    and metadata that says so: each line one padding segment. Read-only
    host arrays, or tensors on CUDA device ``device``."""
    lines, line_tokens = layout.fields["tokens"][2]
    full = Announced(Held(0, 0, 0), lines, b"", segments=lines)
    out: Dict[str, npt.NDArray[Any]] = {}
    for name, (_, typ, _) in layout.fields.items():
        shape = layout.shape(name, full)
        if name == "cu_seqlens":
            out[name] = np.arange(shape[0], dtype=typ) * (line_tokens - 1)
        elif name == "line_segments":
            out[name] = np.arange(shape[0], dtype=typ)
        else:
            fill = _PADDING.get(name, 0)
            out[name] = np.full(shape, pad_id if fill is None else fill, dtype=typ)
        out[name].flags.writeable = False
    if device is None:
        return dict(out)
    t = _cuda._torch()
    return {k: t.as_tensor(a, device=t.device("cuda", device)) for k, a in out.items()}


def make_batch(tokens: Union[Tensor, npt.NDArray[np.int32]], step: int, dtype: str,
               torch_mod: Optional[Torch], padding: bool = False, metadata: Optional[Dict[str, Any]] = None,
               max_seqlen: int = 0, buffers: Optional[Buffers] = None, batch_id: str = "") -> Batch:
    """A Batch of a slot's tokens (or of a padding batch's), with the
    metadata arrays of its slot, if any; its int64 keys in an array of
    buffers when given."""
    # Host tokens as tensors: a fresh int64 array, or int32 views of writable
    # (copy-on-write) memory: torch warns of neither. Read-only ones left
    # (int32 views of an inline message) are copied: torch has no read-only
    # tensors.
    ids, labels, shifted = _targets(tokens, dtype, torch_mod, buffers)
    if isinstance(tokens, np.ndarray) and torch_mod is not None:
        if tokens.flags.writeable and not tokens.flags.owndata:
            tokens = tokens.view()  # the copy-on-write view: tokens itself stays read-only,
            tokens.flags.writeable = False  # as on every other path but copy=True
    batch = {"tokens": tokens, "step": step, "batch_id": batch_id, "lines": tokens.shape[0],
             "input_ids": ids, "labels": labels, "shift_labels": shifted, "padding": padding}
    if metadata:
        batch.update(_metadata(metadata, dtype, torch_mod, max_seqlen))
    return cast(Batch, batch)


def batch_id(job_fingerprint: str, step: int, dp_rank: int, dp_size: int) -> str:
    """The id of batch ``step`` of data-parallel rank ``dp_rank`` of
    ``dp_size`` of the job whose fingerprint the daemon gave at open (the
    daemon's stream.BatchID; dataloaderd explain --batch-id reads it): ""
    without a fingerprint."""
    if not job_fingerprint:
        return ""
    return f"{job_fingerprint}-s{step}-r{dp_rank}of{dp_size}"


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
