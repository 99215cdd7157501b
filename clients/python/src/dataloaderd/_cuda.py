"""GPU delivery: a session's CUDA IPC ring as device tensors, and pinned shared
memory for the ``shm-pinned`` comparison path.

This module imports on any machine: torch and the NVIDIA driver
(``libcuda.so.1``, bound in :mod:`dataloaderd._cudadriver`) are loaded when a
class is first used, and their absence raises :class:`CudaUnavailableError`
(exported from :mod:`dataloaderd`) with a message that says what to do.

Slot lifetime on the GPU. A device view of a slot is read by kernels that run
*after* Python moved on, so a slot may be released to the daemon only once
the work queued on it has finished, or the daemon's next copy overwrites a
batch still being read. :class:`ReleaseFence` records an event on the current
stream when a batch is given up and hands the slot back once that event has
completed, without blocking the trainer's CPU unless the ring runs out.
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading
import warnings
from typing import Deque, Dict, Generic, List, Optional, Tuple, TypeVar, cast

import numpy as np

from ._cudadriver import IPC_HANDLE_SIZE, _Mapping
# _IpcHandle is re-exported for scripts/gpu_check.py's IPC self-test.
from ._cudadriver import _Driver as _Driver, _IpcHandle as _IpcHandle
from ._ring import ShmRing
from ._torchapi import CudaEvent, Tensor, Torch
from .errors import CudaError, CudaUnavailableError, DataloaderdError

__all__ = ["CudaUnavailableError", "CudaError", "IpcRing", "PinnedShm", "ReleaseFence", "IPC_HANDLE_SIZE",
           "device_memory", "require_torch_cuda"]

_CU_MEMHOSTREGISTER_PORTABLE = 0x1
_CU_MEMHOSTREGISTER_READ_ONLY = 0x8  # the client maps the ring read-only (CUDA 11.1+)


def _torch() -> Torch:
    """torch, with a usable GPU, or a clear CudaUnavailableError. (Tests
    replace this function with one that returns a stand-in torch.)"""
    try:
        import torch
    except ImportError as e:
        raise CudaUnavailableError(
            "the cuda and shm-pinned transports need PyTorch with CUDA (pip install torch); "
            "transport='shm' works without it") from e
    if not torch.cuda.is_available():
        raise CudaUnavailableError(
            "PyTorch sees no GPU (torch.cuda.is_available() is False): check the NVIDIA driver and "
            "CUDA_VISIBLE_DEVICES, or use transport='shm'")
    return cast(Torch, torch)  # torch's own annotations are far wider than the protocol


def require_torch_cuda(device: int) -> None:
    """Raises CudaUnavailableError unless torch with CUDA sees GPU ``device``."""
    torch = _torch()
    n = torch.cuda.device_count()
    if not 0 <= device < n:
        raise CudaUnavailableError(f"device {device} asked for, but PyTorch sees {n} GPU(s) "
                                   "(pass device=, or set LOCAL_RANK / CUDA_VISIBLE_DEVICES)")


_driver_lock = threading.Lock()
_driver_instance: Optional[_Driver] = None


def _driver() -> _Driver:
    """The process's driver binding: libcuda.so.1, or the library
    DATALOADERD_CUDA_LIBRARY names (as the daemon's --cuda-library)."""
    global _driver_instance
    with _driver_lock:
        if _driver_instance is None:
            _driver_instance = _Driver(os.environ.get("DATALOADERD_CUDA_LIBRARY") or "libcuda.so.1")
        return _driver_instance


class _DeviceArray:
    """Exposes device memory through __cuda_array_interface__ for torch.as_tensor;
    the tensor keeps this object, and so the mapping, alive."""

    def __init__(self, mapping: _Mapping, offset: int, shape: Tuple[int, ...], typestr: str):
        self._mapping = mapping
        self.__cuda_array_interface__: Dict[str, object] = {
            # torch refuses the read-only flag; the view is writable, and
            # writing into it corrupts the daemon's ring for every reader.
            "shape": shape, "typestr": typestr, "data": (mapping.ptr + offset, False),
            "version": 2, "strides": None,
        }


class IpcRing:
    """A session's device ring, opened once from its CUDA IPC handle.

    ``batch(slot, lines)`` is an int32 tensor [lines, line_tokens] on the ring's
    GPU that is a view of the daemon's slot, no copy. The daemon wrote and
    finished copying the slot before it announced it. Give the slot back
    through a :class:`ReleaseFence`, not at once. Cannot be opened in the
    process that created the handle (CUDA's rule)."""

    def __init__(self, handle: bytes, slots: int, stride: int, line_tokens: int, device: int):
        if len(handle) != IPC_HANDLE_SIZE:
            raise DataloaderdError(f"CUDA IPC handle is {len(handle)} bytes, want {IPC_HANDLE_SIZE}")
        self._torch = _torch()
        self.device = self._torch.device("cuda", device)
        self._slots, self._stride, self._line = slots, stride, line_tokens
        self._mapping: Optional[_Mapping] = _Mapping(_driver(), device, bytes(handle))

    def _view(self, slot: int, shape: Tuple[int, ...], typestr: str, offset: int = 0) -> Tensor:
        if self._mapping is None:
            raise DataloaderdError("the CUDA ring is closed")
        if not 0 <= slot < self._slots:
            raise DataloaderdError(f"slot {slot} of a {self._slots}-slot ring")
        arr = _DeviceArray(self._mapping, slot * self._stride + offset, shape, typestr)
        return self._torch.as_tensor(arr, device=self.device)

    def batch(self, slot: int, lines: int) -> Tensor:
        """Slot's tokens as an int32 device tensor [lines, line_tokens], a view."""
        return self._view(slot, (lines, self._line), "<i4")

    def array(self, slot: int, offset: int, typestr: str, shape: Tuple[int, ...]) -> Tensor:
        """An array of a slot, offset bytes into it, as a device tensor view."""
        return self._view(slot, shape, typestr, offset)

    def slot_bytes(self, slot: int, n: int) -> Tensor:
        """The first n bytes of a slot as a uint8 device tensor, a view."""
        if n > self._stride:
            raise DataloaderdError(f"{n} bytes asked of a slot of stride {self._stride}")
        return self._view(slot, (n,), "|u1")

    def close(self) -> None:
        """Gives up the ring; the handle is closed once no view of it is alive."""
        self._mapping = None

    def __enter__(self) -> IpcRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


K = TypeVar("K")


class ReleaseFence(Generic[K]):
    """Holds given-up slots until the GPU work queued on them has finished.

    ``give_up(key)`` records an event on the current stream of ``device`` (or
    takes ``event``, already recorded where the slot's last reader runs) and
    returns the keys that may now be released (their events completed), in
    order. When more than ``max_held`` keys wait, the oldest is waited for, so
    a trainer cannot hold the whole ring. ``drain()`` waits for all."""

    def __init__(self, device: int, max_held: int = 2):
        self._torch = _torch()
        self._device = self._torch.device("cuda", device)
        self._max = max(1, max_held)
        self._held: Deque[Tuple[K, CudaEvent]] = collections.deque()

    def give_up(self, key: K, event: Optional[CudaEvent] = None) -> List[K]:
        ev = event
        if ev is None:
            ev = self._torch.cuda.Event()
            ev.record(self._torch.cuda.current_stream(self._device))
        self._held.append((key, ev))
        out = []
        while self._held and (len(self._held) > self._max or self._held[0][1].query()):
            k, e = self._held.popleft()
            e.synchronize()
            out.append(k)
        return out

    def completed(self) -> List[K]:
        """The oldest keys whose events have completed, in order, without
        waiting and without giving anything up."""
        out = []
        while self._held and self._held[0][1].query():
            out.append(self._held.popleft()[0])
        return out

    def drain(self) -> List[K]:
        out = []
        while self._held:
            k, e = self._held.popleft()
            e.synchronize()
            out.append(k)
        return out

    def __len__(self) -> int:
        return len(self._held)


class PinnedShm:
    """The ``shm-pinned`` path: the shared-memory ring, page-locked for the GPU.

    The mapping of an open ``ShmRing`` is registered with the driver once
    (read-only, portable), then ``fetch(slot, lines)`` queues one non-blocking
    host-to-device copy of the batch on this object's own stream into a fresh
    device tensor, makes the current stream wait for it, and returns the tensor
    and the copy's event: the shm slot may be released once ``event.query()``
    is true (or through a ReleaseFence keyed on it).

    The copy does not wait for work already queued on the current stream: the
    tensor is allocated on the copy stream and marked as used on the current
    one (``record_stream``), so a copy overlaps the trainer's previous step."""

    def __init__(self, ring: ShmRing, device: int):
        self._torch = torch = _torch()
        self.device = torch.device("cuda", device)
        self._index = device
        self._ring = ring
        self._drv = _driver()
        view = np.frombuffer(ring.mapping(), dtype=np.uint8)
        self._ptr, self._size = int(view.ctypes.data), view.nbytes
        del view
        # Host tensors of every slot, made once: torch warns that the
        # read-only mapping is not writable (nothing writes through them).
        full = ring.stride // (4 * ring.line_tokens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self._host = [torch.from_numpy(ring.batch(i, full)) for i in range(ring.slots)]
        self._ctx = self._drv.retain(device)
        registered = False
        try:
            with self._drv.in_context(self._ctx):
                self._drv.call("host_register", ctypes.c_void_p(self._ptr), self._size,
                               _CU_MEMHOSTREGISTER_PORTABLE | _CU_MEMHOSTREGISTER_READ_ONLY)
            registered = True
            self._stream = torch.cuda.Stream(device=self.device)
        except BaseException:
            self._host = []  # views of the mapping, which the caller unmaps next
            try:
                if registered:
                    with self._drv.in_context(self._ctx):
                        self._drv.call("host_unregister", ctypes.c_void_p(self._ptr))
            finally:
                self._drv.release(device)
            raise

    def fetch(self, slot: int, lines: int) -> Tuple[Tensor, CudaEvent]:
        """Copies a batch to the GPU: (int32 tensor [lines, line_tokens], event)."""
        torch = self._torch
        if self._ptr == 0:
            raise DataloaderdError("the pinned ring is closed")
        host = self._host[slot]
        if lines != host.shape[0]:
            host = host[:lines]
        current = torch.cuda.current_stream(self._index)
        with torch.cuda.stream(self._stream):
            out = torch.empty(host.shape, dtype=torch.int32, device=self.device)
            out.copy_(host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        current.wait_event(done)
        out.record_stream(current)  # its memory is not reused before current's work on it is done
        return out, done

    def fetch_bytes(self, slot: int, n: int) -> Tuple[Tensor, CudaEvent]:
        """Copies the first n bytes of a slot to the GPU, as fetch does the
        tokens: (uint8 tensor [n], event). For batches with metadata."""
        torch = self._torch
        if self._ptr == 0:
            raise DataloaderdError("the pinned ring is closed")
        ring = self._ring
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            host = torch.from_numpy(np.frombuffer(ring.mapping(), dtype=np.uint8, count=n,
                                                  offset=ring.data_offset + slot * ring.stride))
        current = torch.cuda.current_stream(self._index)
        with torch.cuda.stream(self._stream):
            out = torch.empty((n,), dtype=torch.uint8, device=self.device)
            out.copy_(host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        current.wait_event(done)
        out.record_stream(current)
        return out, done

    def close(self) -> None:
        """Waits for copies in flight and unregisters the memory. Idempotent."""
        ptr, self._ptr = self._ptr, 0
        if not ptr:
            return
        self._host = []  # views of the mapping, which the ring unmaps next
        self._stream.synchronize()
        try:
            with self._drv.in_context(self._ctx):
                self._drv.call("host_unregister", ctypes.c_void_p(ptr))
        finally:
            self._drv.release(self._index)

    def __enter__(self) -> PinnedShm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def device_memory(device: int) -> Tuple[int, int]:
    """(free, total) bytes of a GPU as the driver sees them, every process counted."""
    drv = _driver()
    ctx = drv.retain(device)
    try:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        with drv.in_context(ctx):
            drv.call("mem_get_info", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value
    finally:
        drv.release(device)
