"""Test corpora written with numpy: Megatron indexed datasets whose every token
value is unique, so that exactly-once delivery can be checked by counting."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import numpy.typing as npt

EOS = 0


def write_megatron(prefix: str, docs: Sequence[npt.NDArray[np.int32]], dtype: type = np.int32) -> str:
    """Writes docs (lists of token arrays) as prefix.bin/prefix.idx."""
    codes: Dict[type, int] = {np.int32: 4, np.uint16: 8}
    code = codes[dtype]
    size = np.dtype(dtype).itemsize
    lengths = np.array([len(d) for d in docs], dtype=np.int32)
    pointers = np.zeros(len(docs), dtype=np.int64)
    pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * size)
    np.concatenate(docs).astype(dtype).tofile(prefix + ".bin")
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.uint64(1).tobytes())
        f.write(np.uint8(code).tobytes())
        f.write(np.uint64(len(docs)).tobytes())
        f.write(np.uint64(len(docs) + 1).tobytes())
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(len(docs) + 1, dtype=np.int64).tobytes())
    return prefix


def unique_docs(rng: np.random.Generator, n: int, max_len: int,
                first: int) -> Tuple[List[npt.NDArray[np.int32]], int]:
    """n documents of random lengths whose values are first, first+1, ..."""
    docs = []
    for _ in range(n):
        length = int(rng.integers(1, max_len + 1))
        docs.append(np.arange(first, first + length, dtype=np.int32))
        first += length
    return docs, first


def make_corpus(directory: str, seed: int = 0, sizes: Sequence[Tuple[int, int]] = ((120, 60), (80, 40)),
                ) -> Tuple[List[Dict[str, Any]], List[Tuple[int, int]]]:
    """Datasets named d0, d1, ... with disjoint, unique token values. Returns the
    dataset entries and, per dataset, its (first, last+1) value range."""
    rng = np.random.default_rng(seed)
    first = 1
    datasets, ranges = [], []
    for i, (n, max_len) in enumerate(sizes):
        docs, nxt = unique_docs(rng, n, max_len, first)
        prefix = write_megatron(os.path.join(directory, f"d{i}"), docs)
        datasets.append({"name": f"d{i}", "path": prefix, "format": "megatron", "weight": 1.0})
        ranges.append((first, nxt))
        first = nxt
    return datasets, ranges


def data_tokens(arr: npt.ArrayLike) -> npt.NDArray[Any]:
    """The corpus tokens of a batch: everything but EOS/padding."""
    flat: npt.NDArray[Any] = np.asarray(arr).ravel()
    out: npt.NDArray[Any] = flat[flat != EOS]
    return out
