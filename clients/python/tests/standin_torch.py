"""A stand-in for torch's CUDA runtime, for machines without a GPU: device
tensors are numpy views of the stand-in driver's "device memory" (a file
under /dev/shm, see internal/cuda/testdata/fakecuda.c), streams do nothing,
and events complete on their second query. It implements the protocols of
dataloaderd._torchapi; tests/test_cuda_standin.py and
scripts/cuda_standin_wait.py put it in place of dataloaderd._cuda._torch."""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, ClassVar, ContextManager, List, Optional, Tuple, Union, cast

import numpy as np
import numpy.typing as npt

from dataloaderd._torchapi import CudaEvent, CudaStream, Device, Tensor, Torch


class StandinEvent:
    """An event that completes on the second query after its record, so the
    fence both finds slots done and has to wait for some. Every event made is
    kept in ``made``, in order."""

    made: ClassVar[List[StandinEvent]] = []

    def __init__(self) -> None:
        self.queries = 0
        self.waited = False
        StandinEvent.made.append(self)

    def record(self, stream: CudaStream) -> None:
        self.queries = 0

    def query(self) -> bool:
        self.queries += 1
        return self.waited or self.queries > 1

    def synchronize(self) -> None:
        self.waited = True

    def done(self) -> bool:
        return self.waited or self.queries > 1


class DeviceTensor(np.ndarray[Any, np.dtype[Any]]):
    """What torch.as_tensor gives for device memory: here a numpy view of it."""

    _keep: object  # what the view's memory belongs to

    def clone(self) -> DeviceTensor:
        return np.array(self).view(DeviceTensor)

    def long(self) -> DeviceTensor:
        return np.asarray(self, dtype=np.int64).view(DeviceTensor)

    def contiguous(self) -> DeviceTensor:
        return np.ascontiguousarray(self).view(DeviceTensor)

    def stride(self) -> Tuple[int, ...]:  # torch's: in elements
        return tuple(s // self.itemsize for s in self.strides)

    def as_strided(self, size: Tuple[int, ...], stride: Tuple[int, ...]) -> DeviceTensor:
        byte_strides = tuple(s * self.itemsize for s in stride)
        return np.lib.stride_tricks.as_strided(self, size, byte_strides, writeable=False).view(DeviceTensor)

    def copy_(self, src: npt.ArrayLike, non_blocking: bool = False) -> DeviceTensor:
        np.copyto(self, src)
        return self

    def record_stream(self, stream: CudaStream) -> None:
        pass


class StandinStream:
    def wait_stream(self, other: CudaStream) -> None:
        pass

    def wait_event(self, event: CudaEvent) -> None:
        pass

    def synchronize(self) -> None:
        pass


class StandinDevice:
    def __init__(self, kind: str, index: int):
        self.type, self.index = kind, index


class Cuda:
    """torch.cuda: two GPUs, always available."""

    Event = StandinEvent

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 2

    def current_stream(self, device: Union[Device, int, None] = None) -> StandinStream:
        return StandinStream()

    def Stream(self, device: Optional[Device] = None) -> StandinStream:  # noqa: N802 - torch's name
        return StandinStream()

    def stream(self, s: CudaStream) -> ContextManager[object]:
        return contextlib.nullcontext()


class StandinTorch:
    """The torch module; each one has its own ``cuda``, which a test may break."""

    int32 = np.int32
    uint8 = np.uint8
    bool = np.bool_

    def __init__(self) -> None:
        self.cuda = Cuda()

    def device(self, kind: str, index: int) -> StandinDevice:
        return StandinDevice(kind, index)

    def as_tensor(self, arr: object, device: Optional[Device] = None) -> Tensor:
        iface = getattr(arr, "__cuda_array_interface__")
        assert iface["typestr"] in ("<i4", "|u1") and iface["strides"] is None
        dtype = np.dtype(iface["typestr"])
        n = int(np.prod(iface["shape"]))
        buf = (ctypes.c_char * (n * dtype.itemsize)).from_address(iface["data"][0])
        view = np.frombuffer(buf, dtype=dtype).reshape(iface["shape"]).view(DeviceTensor)
        view._keep = arr  # the mapping lives while the view does, as with torch
        return _as_tensor(view)

    def from_numpy(self, a: npt.NDArray[Any]) -> Tensor:
        return _as_tensor(a)

    def empty(self, shape: Tuple[int, ...], dtype: object, device: Device) -> Tensor:
        assert dtype is self.int32 or dtype is self.uint8, "the client makes int32 and uint8 tensors only"
        return _as_tensor(np.empty(shape, dtype).view(DeviceTensor))


def _as_tensor(a: npt.NDArray[Any]) -> Tensor:
    # numpy keeps the subclass through the slicing the client does, which its
    # annotations cannot say.
    return cast(Tensor, a)


def fake_torch() -> Torch:
    """A fresh stand-in torch module."""
    return StandinTorch()
