"""A Loader's arguments, checked once: where the daemon is, which rank this
is, and how its batches are read (Options)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional, Tuple, Type, Union, get_args

import numpy as np

from .batch import DTYPES, DType
from .config import env_int
from .errors import ConfigError, DaemonUnavailableError

if TYPE_CHECKING:  # torch is optional; a type checker without it sees Any
    import torch

__all__ = ["Transport", "End", "DTypeArg", "Options", "check_options", "check_rank", "socket_path"]

# How batches reach the process (dataloaderd._delivery.DELIVERIES has one
# delivery for each), and what a loader yields after its rank's last batch.
Transport = Literal["shm", "inline", "cuda", "shm-pinned"]
End = Literal["stop", "pad"]
# Loader(dtype=...): a name, or the numpy type, numpy dtype or torch dtype of that name.
DTypeArg = Union[DType, Type[np.int64], Type[np.int32], "np.dtype[Any]", "torch.dtype"]

TRANSPORTS: Tuple[Transport, ...] = get_args(Transport)
ENDS: Tuple[End, ...] = get_args(End)


@dataclass(frozen=True)
class Options:
    """How a loader reads its batches (Loader's arguments of the same names)."""

    transport: Transport
    dtype: DType
    end: End
    device: int
    consumers: int
    slots: int
    copy: bool
    fast: bool
    timeout: float
    batch_timeout: Optional[float]
    reconnect_timeout: float


def check_rank(dp_rank: Optional[int], dp_size: Optional[int]) -> Tuple[int, int]:
    """dp_rank and dp_size, torchrun's RANK and WORLD_SIZE by default."""
    rank = env_int("RANK", 0) if dp_rank is None else int(dp_rank)
    size = env_int("WORLD_SIZE", 1) if dp_size is None else int(dp_size)
    if size < 1 or not 0 <= rank < size:
        raise ConfigError(f"dp_rank {rank} is out of range for dp_size {size}")
    return rank, size


def check_options(transport: str, dtype: object, end: str, device: Optional[int], consumers: int, slots: int,
                  copy: bool, fast: bool, timeout: float, batch_timeout: Optional[float],
                  reconnect_timeout: float) -> Options:
    """The Options of a Loader's arguments, each checked by name."""
    if transport not in TRANSPORTS:
        raise ConfigError(f"transport {transport!r}: want one of {', '.join(TRANSPORTS)}")
    if consumers < 1 or slots < 0:
        raise ConfigError(f"consumers must be >= 1 and slots >= 0, got {consumers} and {slots}")
    if batch_timeout is not None and not batch_timeout > 0:
        raise ConfigError(f"batch_timeout must be > 0 seconds or None, got {batch_timeout!r}")
    if not reconnect_timeout >= 0:
        raise ConfigError(f"reconnect_timeout must be >= 0 seconds (0: off), got {reconnect_timeout!r}")
    if end not in ENDS:
        raise ConfigError(f"end {end!r}: want 'stop' (iteration ends after the rank's last batch) or 'pad'")
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        dtype = np.dtype(dtype)  # numpy.int64, as the README says
    name = str(dtype).replace("torch.", "")  # "int64", np.dtype("int64") and torch.int64 alike
    if name not in DTYPES:
        raise ConfigError(f"dtype {dtype!r}: want one of {', '.join(DTYPES)} (or the torch or numpy type)")
    dev = env_int("LOCAL_RANK", 0) if device is None else int(device)
    if dev < 0:
        raise ConfigError(f"device must be >= 0, got {dev}")
    return Options(transport=transport, dtype=name, end=end, device=dev,
                   consumers=consumers, slots=slots, copy=copy, fast=fast, timeout=timeout,
                   batch_timeout=batch_timeout, reconnect_timeout=float(reconnect_timeout))


def socket_path(socket: Optional[Union[str, os.PathLike[str]]]) -> str:
    """The daemon's socket: socket, else DATALOADERD_SOCKET; a unix:// prefix
    dropped. Raises DaemonUnavailableError when there is none."""
    path = os.fspath(socket) if socket else os.environ.get("DATALOADERD_SOCKET")
    if not path:
        raise DaemonUnavailableError("no daemon socket: pass socket= or set DATALOADERD_SOCKET")
    path = path[len("unix://"):] if path.startswith("unix://") else path
    if not os.path.exists(path):
        raise DaemonUnavailableError(f"no daemon socket at {path}: is 'dataloaderd serve --socket {path}' running?")
    return path
