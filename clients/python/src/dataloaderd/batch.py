"""The batches a Loader yields."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict, Union

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # torch is optional; a type checker without it sees Any
    import torch

__all__ = ["Batch"]


class Batch(TypedDict):
    """One step's lines, indexed as a dict: ``batch["input_ids"]``.

    ``tokens`` is an int32 array ``[lines, seq_len + 1]``: a numpy array on the
    ``shm`` and ``inline`` transports, a device tensor on ``cuda`` and
    ``shm-pinned``. ``input_ids`` and ``labels`` are ``tokens[:, :-1]`` and
    ``tokens[:, 1:]`` as torch tensors (numpy arrays when torch is not
    installed). ``step`` counts from 1 over the whole run, resumes included;
    ``lines`` is ``batch_size``, fewer only in the last batch of a bounded run.
    On ``shm`` the arrays are views of shared memory, valid until the next
    batch is asked for (README: lifetime of a batch)."""

    tokens: Union[torch.Tensor, npt.NDArray[np.int32]]
    step: int
    lines: int
    input_ids: torch.Tensor
    labels: torch.Tensor
