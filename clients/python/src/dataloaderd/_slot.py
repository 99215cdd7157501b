"""Where a batch's arrays lie in its slot (the daemon says, in
OpenSessionResponse.fields), and how many rows of each a batch uses."""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple, TypeVar

from ._feed import Announced
from ._proto import dataloader_pb2 as pb

__all__ = ["Layout", "Field"]

# name -> (offset, typestr, shape of a full batch)
Field = Tuple[int, str, Tuple[int, ...]]
_TYPESTR = {"int32": "<i4", "uint8": "|u1"}
A = TypeVar("A")


class Layout:
    """A session's slot layout: the tokens, then the metadata fields."""

    def __init__(self, fields: Sequence[pb.SlotField], line_tokens: int, batch_size: int):
        self.fields: Dict[str, Field] = {}
        for f in fields:
            self.fields[f.name] = (f.offset, _TYPESTR[f.dtype], tuple(f.shape))
        if "tokens" not in self.fields:  # a daemon that predates the field list
            self.fields["tokens"] = (0, "<i4", (batch_size, line_tokens))
        self.metadata: List[str] = [n for n in self.fields if n != "tokens"]
        self.bytes = max(off + _size(typ, shape) for off, typ, shape in self.fields.values())

    def shape(self, name: str, batch: Announced) -> Tuple[int, ...]:
        """The shape of a field in this batch (fewer rows in a short batch)."""
        full = self.fields[name][2]
        if name == "cu_seqlens":
            return (batch.segments + 1,)
        if name == "line_segments":
            return (batch.lines + 1,)
        return (batch.lines,) + full[1:]

    def used(self, batch: Announced) -> int:
        """Bytes of the slot a batch's arrays reach."""
        return max(off + _size(typ, self.shape(name, batch)) for name, (off, typ, _) in self.fields.items())

    def cut(self, batch: Announced, view: Callable[[int, str, Tuple[int, ...]], A]) -> Dict[str, A]:
        """Every field of the batch, made by view(offset, typestr, shape)."""
        return {name: view(off, typ, self.shape(name, batch)) for name, (off, typ, _) in self.fields.items()}


def _size(typestr: str, shape: Tuple[int, ...]) -> int:
    n = 1 if typestr == "|u1" else 4
    for d in shape:
        n *= d
    return n
