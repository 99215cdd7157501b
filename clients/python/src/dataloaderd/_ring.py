"""A read-only mapping of a session's shared-memory ring."""

from __future__ import annotations

import mmap
import os

import numpy as np


class ShmRing:
    """Maps the ring file once; batch() returns zero-copy, read-only views."""

    def __init__(self, path: str, slots: int, stride: int, line_tokens: int, data_offset: int = 0):
        fd = os.open(path, os.O_RDONLY)
        try:
            self._mm = mmap.mmap(fd, data_offset + slots * stride, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self._data = data_offset
        self._stride = stride
        self._line = line_tokens

    def batch(self, slot: int, lines: int) -> np.ndarray:
        """The tokens of a slot as an int32 array [lines, line_tokens], a view of the ring."""
        return np.frombuffer(self._mm, dtype="<i4", count=lines * self._line,
                             offset=self._data + slot * self._stride).reshape(lines, self._line)

    def close(self) -> None:
        """Unmaps the ring; while views of it are alive the mapping stays until they go."""
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # a batch view is still referenced; the GC unmaps it later
