"""The part of PyTorch the client uses, as protocols.

torch is optional and is not installed where the client is type-checked, so
the client types its few uses of it here; the stand-in torch of
tests/standin_torch.py implements the same protocols.
"""

from __future__ import annotations

from typing import Any, ContextManager, Optional, Protocol, Tuple, Union

import numpy as np
import numpy.typing as npt

Index = Union[int, slice, Tuple[Union[int, slice], ...]]


class Device(Protocol):
    """torch.device."""

    @property
    def index(self) -> Optional[int]: ...


class CudaStream(Protocol):
    """torch.cuda.Stream."""

    def wait_event(self, event: CudaEvent) -> None: ...

    def synchronize(self) -> None: ...


class CudaEvent(Protocol):
    """torch.cuda.Event."""

    def record(self, stream: CudaStream) -> None: ...

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


class Tensor(Protocol):
    """torch.Tensor, as far as the client reads and makes them."""

    @property
    def shape(self) -> Tuple[int, ...]: ...

    def __getitem__(self, index: Index) -> Tensor: ...

    def clone(self) -> Tensor: ...

    def long(self) -> Tensor: ...

    def contiguous(self) -> Tensor: ...

    def stride(self) -> Tuple[int, ...]: ...

    def as_strided(self, size: Tuple[int, ...], stride: Tuple[int, ...]) -> Tensor: ...

    def copy_(self, src: Tensor, non_blocking: bool = ...) -> Tensor: ...

    def record_stream(self, stream: CudaStream) -> None: ...


class Cuda(Protocol):
    """torch.cuda."""

    def is_available(self) -> bool: ...

    def device_count(self) -> int: ...

    def Event(self) -> CudaEvent: ...  # noqa: N802 - torch's name

    def Stream(self, device: Device) -> CudaStream: ...  # noqa: N802 - torch's name

    def current_stream(self, device: Union[Device, int]) -> CudaStream: ...

    def stream(self, stream: CudaStream) -> ContextManager[object]: ...


class Torch(Protocol):
    """The torch module."""

    @property
    def cuda(self) -> Cuda: ...

    @property
    def int32(self) -> object: ...

    @property
    def uint8(self) -> object: ...

    @property
    def bool(self) -> object: ...

    def device(self, kind: str, index: int) -> Device: ...

    def as_tensor(self, data: object, device: Device) -> Tensor: ...

    def from_numpy(self, array: npt.NDArray[Any]) -> Tensor: ...

    def empty(self, shape: Tuple[int, ...], dtype: object, device: Device) -> Tensor: ...
