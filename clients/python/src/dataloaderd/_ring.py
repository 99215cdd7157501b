"""A session's shared-memory ring, mapped read-only, and on demand also
copy-on-write."""

from __future__ import annotations

import mmap
import os
from typing import Any, Optional, Tuple, cast

import numpy as np
import numpy.typing as npt


class ShmRing:
    """Maps the ring file once; batch() returns zero-copy, read-only views."""

    def __init__(self, path: str, slots: int, stride: int, line_tokens: int, data_offset: int = 0):
        fd = os.open(path, os.O_RDONLY)
        try:
            self._mm: Optional[mmap.mmap] = mmap.mmap(fd, data_offset + slots * stride, mmap.MAP_SHARED,
                                                      mmap.PROT_READ)
        finally:
            os.close(fd)
        self._path = path
        self._private: Optional[mmap.mmap] = None
        self.slots = slots
        self.data_offset = data_offset
        self.stride = stride
        self.line_tokens = line_tokens

    def mapping(self) -> mmap.mmap:
        """The whole mapping (control pages, if any, then the slots)."""
        if self._mm is None:
            raise ValueError("the shared-memory ring is closed")
        return self._mm

    def batch(self, slot: int, lines: int) -> npt.NDArray[np.int32]:
        """The tokens of a slot as an int32 array [lines, line_tokens], a view of the ring."""
        return cast(npt.NDArray[np.int32], self.array(slot, 0, "<i4", (lines, self.line_tokens)))

    def array(self, slot: int, offset: int, typestr: str, shape: Tuple[int, ...], private: bool = False) -> Any:
        """An array of a slot (offset bytes into it): a read-only view of the
        ring, or with private a writable, copy-on-write one: reads see the
        ring, a write copies the pages it touches into this process only;
        forget(slot) drops those copies before the slot is given back."""
        count = 1
        for d in shape:
            count *= d
        mm = self._private_mapping() if private else self.mapping()
        return np.frombuffer(mm, dtype=typestr, count=count,
                             offset=self.data_offset + slot * self.stride + offset).reshape(shape)

    def _private_mapping(self) -> mmap.mmap:
        if self._private is None:
            self.mapping()  # raises once closed
            fd = os.open(self._path, os.O_RDONLY)
            try:
                self._private = mmap.mmap(fd, self.data_offset + self.slots * self.stride, access=mmap.ACCESS_COPY)
            finally:
                os.close(fd)
        return self._private

    def forget(self, slot: int) -> None:
        """Drops the pages of a slot written through a private array, so its
        next batch is read from the ring again."""
        if self._private is not None:
            self._private.madvise(mmap.MADV_DONTNEED, self.data_offset + slot * self.stride, self.stride)

    def close(self) -> None:
        """Unmaps the ring; while views of it are alive the mapping stays until they go."""
        for name in ("_mm", "_private"):
            mm = getattr(self, name)
            setattr(self, name, None)
            if mm is not None:
                try:
                    mm.close()
                except BufferError:
                    pass  # a batch view is still referenced; the GC unmaps it later
