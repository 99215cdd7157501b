"""Checked by mypy --strict (mypy.ini's files), never run: a trainer's use
of a Batch's metadata keys and of the Loader's typed arguments. mypy fails
if Batch loses a key or gets a wrong type, or if the arguments take any
string again (each ``type: ignore`` below must be needed: strict mode
reports an unused one)."""

from typing import Any, Optional

import numpy as np

from dataloaderd import Batch, DType, End, Loader, Transport


def masked_loss(batch: Batch, per_token: Any) -> Any:
    """A loss over the positions loss_mask keeps."""
    mask = batch["loss_mask"]
    return (per_token * mask).sum() / mask.sum()


def varlen_args(batch: Batch) -> Optional[tuple[Any, int]]:
    """flash-attn's varlen arguments, when the config asked for them."""
    if "cu_seqlens" not in batch:
        return None
    cu, longest = batch["cu_seqlens"], batch["max_seqlen"]
    segments: Any = batch["line_segments"]
    return cu[segments], longest + 0


def every_key(batch: Batch) -> list[Any]:
    """Each metadata key, as a trainer reads it."""
    return [batch["position_ids"], batch["document_ids"], batch["dataset_ids"], batch["input_ids"],
            batch["labels"], batch["shift_labels"], batch["step"] + batch["lines"], batch["padding"]]


def wrong_key(batch: Batch) -> Any:
    return batch["attention_mask"]  # type: ignore[typeddict-item]


def not_an_int(batch: Batch) -> str:
    return batch["max_seqlen"]  # type: ignore[return-value]


def arguments(config: dict[str, Any]) -> None:
    transport: Transport = "shm-pinned"
    end: End = "pad"
    dtype: DType = "int32"
    Loader(config, transport=transport, end=end, dtype=dtype)
    Loader(config, dtype=np.dtype("int64"))
    Loader(config, transport="tcp")  # type: ignore[arg-type]
    Loader(config, end="wrap")  # type: ignore[arg-type]
