"""How an announced slot becomes tokens, and when it may be given back: one
class per transport, behind the Delivery protocol.

Where announcements come from (control block or stream) is the feed's
concern (dataloaderd._feed); a delivery only gets each announcement and the
feed's release function.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Dict, Optional, Protocol, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _cuda
from ._feed import Announced, Held, Release
from ._proto import dataloader_pb2 as pb
from ._ring import ShmRing
from ._slot import Layout
from ._torchapi import Tensor
from .errors import DataloaderdError

__all__ = ["Tokens", "Arrays", "Delivery", "ShmDelivery", "InlineDelivery", "CudaDelivery", "PinnedDelivery", "DELIVERIES"]

# Host arrays (shm, inline) or device tensors (cuda, shm-pinned).
Tokens = Union[npt.NDArray[np.int32], Tensor]
# A batch's arrays by name: tokens, and the metadata its config asks for.
Arrays = Dict[str, Any]


class Delivery(Protocol):
    """One transport's way from an announced slot to tokens.

    Made when a session opens (a transport that cannot work in this process
    raises then, before the daemon makes a ring); ``open`` maps what the
    session's reply describes; ``take`` turns an announcement into tokens;
    ``give_back`` returns the batch in hand when the next one is asked for;
    ``take`` returns the batch's arrays by name (``tokens`` and the
    metadata fields of the session's slot layout).
    ``give_back_finished`` returns, while the loader waits, slots that were
    given back but whose GPU work was still running; ``close`` lets go of
    everything (the daemon is told after it)."""

    wire: ClassVar[pb.Transport.ValueType]  # what the daemon is asked for

    def open(self, session: pb.OpenSessionResponse, release: Release) -> None: ...

    def take(self, batch: Announced) -> Arrays: ...

    def give_back(self) -> None: ...

    def give_back_finished(self) -> None: ...

    def close(self) -> None: ...


def layout_of(session: pb.OpenSessionResponse) -> Layout:
    return Layout(session.fields, session.line_tokens, session.batch_size)


def _map_ring(session: pb.OpenSessionResponse) -> ShmRing:
    r = session.ring
    return ShmRing(r.path, r.slots, r.slot_stride, session.line_tokens, r.data_offset)


def _unmappable(session: pb.OpenSessionResponse, e: Exception) -> DataloaderdError:
    return DataloaderdError(
        f"cannot map the ring {session.ring.path} ({e}): is the daemon on another machine or in "
        "another container? transport='inline' works without shared memory")


def _fence_hold(slots: int) -> int:
    """How many given-up device slots a ReleaseFence may hold: at most 2, and
    fewer than the ring has, since the daemon needs a free slot to produce the
    batch the loader waits for."""
    return max(1, min(2, slots - 1))


class ShmDelivery:
    """``shm``: views of the shared-memory ring, each valid until the next
    batch is asked for: read-only ones (a write raises numpy's ValueError),
    or with ``writable`` copy-on-write ones (a write copies the pages it
    touches into this process: it never reaches the ring, the daemon or the
    other consumers; for torch, which has no read-only tensors). With
    ``copy`` a private copy, the slot released all the same when the next
    batch is asked for: a process that dies holding a batch leaves it
    unreleased, for its replacement (docs/rank-restart.md)."""

    wire: ClassVar[pb.Transport.ValueType] = pb.TRANSPORT_SHM

    def __init__(self, copy: bool, device: int, writable: bool = False):
        self._copy, self._writable = copy, writable
        self._ring: Optional[ShmRing] = None
        self._release: Optional[Release] = None
        self._held: Optional[Held] = None

    def open(self, session: pb.OpenSessionResponse, release: Release) -> None:
        try:
            self._ring = _map_ring(session)
        except (OSError, ValueError) as e:
            raise _unmappable(session, e) from e
        self._layout = layout_of(session)
        self._release = release

    def take(self, batch: Announced) -> Arrays:
        ring = self._ring
        assert ring is not None and self._release is not None, "open() first"
        slot = batch.held.slot
        arrays = self._layout.cut(batch, lambda off, typ, shape: ring.array(slot, off, typ, shape, self._writable))
        if self._copy:
            arrays = {name: a.copy() for name, a in arrays.items()}
        self._held = batch.held  # released when the next batch is asked for, copied or not
        return arrays

    def give_back(self) -> None:
        if self._held is not None and self._release is not None:
            if self._writable and not self._copy and self._ring is not None:
                self._ring.forget(self._held.slot)  # what was written stays out of the slot's next batch
            self._release(self._held)
        self._held = None

    def give_back_finished(self) -> None:
        pass

    def close(self) -> None:
        self._held = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None


class InlineDelivery:
    """``inline``: the batch's bytes came in the announcement; the slot goes
    back when the next batch is asked for (a process that dies holding it
    leaves it unreleased, for its replacement)."""

    wire: ClassVar[pb.Transport.ValueType] = pb.TRANSPORT_INLINE

    def __init__(self, copy: bool, device: int, writable: bool = False):
        self._line_tokens = 0
        self._release: Optional[Release] = None
        self._held: Optional[Held] = None

    def open(self, session: pb.OpenSessionResponse, release: Release) -> None:
        self._layout = layout_of(session)
        self._release = release

    def take(self, batch: Announced) -> Arrays:
        assert self._release is not None, "open() first"
        data = batch.data

        def view(off: int, typ: str, shape: Any) -> Any:
            return np.frombuffer(data, dtype=typ, count=int(np.prod(shape)), offset=off).reshape(shape)

        arrays = self._layout.cut(batch, view)
        self._held = batch.held
        return arrays

    def give_back(self) -> None:
        if self._held is not None and self._release is not None:
            self._release(self._held)
        self._held = None

    def give_back_finished(self) -> None:
        pass

    def close(self) -> None:
        self._held = None


class CudaDelivery:
    """``cuda``: device tensors that view the daemon's device ring (CUDA IPC).
    A slot goes back through a ReleaseFence once the next batch is asked for
    and the GPU work queued on it has finished; with ``copy`` the batch is
    cloned on the current stream (the fence waits for the clone too)."""

    wire: ClassVar[pb.Transport.ValueType] = pb.TRANSPORT_CUDA

    def __init__(self, copy: bool, device: int, writable: bool = False):
        _cuda.require_torch_cuda(device)
        self._copy = copy
        self.ring: Optional[_cuda.IpcRing] = None
        self.fence: Optional[_cuda.ReleaseFence[Held]] = None
        self._release: Optional[Release] = None
        self._held: Optional[Held] = None

    def open(self, session: pb.OpenSessionResponse, release: Release) -> None:
        r = session.ring
        self.ring = _cuda.IpcRing(r.ipc_handle, r.slots, r.slot_stride, session.line_tokens, r.device)
        self.fence = _cuda.ReleaseFence(r.device, max_held=_fence_hold(r.slots))
        self._layout = layout_of(session)
        self._release = release

    def take(self, batch: Announced) -> Arrays:
        ring = self.ring
        assert ring is not None, "open() first"
        slot = batch.held.slot
        arrays = self._layout.cut(batch, lambda off, typ, shape: ring.array(slot, off, typ, shape))
        if self._copy:
            arrays = {name: a.clone() for name, a in arrays.items()}  # queued on the current stream: the fence waits
        self._held = batch.held  # fenced when the next batch is asked for, cloned or not
        return arrays

    def _fence_up(self, held: Held) -> None:
        assert self.fence is not None and self._release is not None, "open() first"
        for done in self.fence.give_up(held):
            self._release(done)

    def give_back(self) -> None:
        if self._held is not None:
            self._fence_up(self._held)  # its slot goes back once the GPU work queued on it is done
            self._held = None

    def give_back_finished(self) -> None:
        _release_finished(self.fence, self._release)

    def close(self) -> None:
        fence, self.fence = self.fence, None
        if fence is not None:
            if self._held is not None:
                fence.give_up(self._held)  # the batch in hand too
            fence.drain()  # kernels may still read device slots
        self._held = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None


class PinnedDelivery:
    """``shm-pinned``: a fresh device tensor per batch, copied out of the
    shared-memory ring (registered with the driver as pinned memory) on a
    stream of the loader's own; the shm slot goes back once the copy's event
    has completed and the next batch is asked for (a process that dies
    holding a batch leaves it unreleased, for its replacement)."""

    wire: ClassVar[pb.Transport.ValueType] = pb.TRANSPORT_SHM  # shm to the daemon; the copy to the GPU is the client's

    def __init__(self, copy: bool, device: int, writable: bool = False):
        _cuda.require_torch_cuda(device)
        self._device = device
        self._ring: Optional[ShmRing] = None
        self._pinned: Optional[_cuda.PinnedShm] = None
        self.fence: Optional[_cuda.ReleaseFence[Held]] = None
        self._release: Optional[Release] = None
        self._held: Optional[Tuple[Held, Any]] = None  # the batch in hand and its copy's event

    def open(self, session: pb.OpenSessionResponse, release: Release) -> None:
        try:
            self._ring = _map_ring(session)
            self._pinned = _cuda.PinnedShm(self._ring, self._device)
            self.fence = _cuda.ReleaseFence(self._device, max_held=_fence_hold(session.ring.slots))
        except (OSError, ValueError) as e:
            raise _unmappable(session, e) from e
        self._layout = layout_of(session)
        self._release = release

    def take(self, batch: Announced) -> Arrays:
        assert self._pinned is not None and self.fence is not None and self._release is not None, "open() first"
        if not self._layout.metadata:
            tokens, copied = self._pinned.fetch(batch.held.slot, batch.lines)
            arrays: Arrays = {"tokens": tokens}
        else:
            # One copy of the slot's used bytes; the arrays are views of it.
            raw, copied = self._pinned.fetch_bytes(batch.held.slot, self._layout.used(batch))
            torch = _cuda._torch()
            arrays = self._layout.cut(batch, lambda off, typ, shape: _device_view(torch, raw, off, typ, shape))
        self._held = (batch.held, copied)  # fenced when the next batch is asked for
        return arrays

    def give_back(self) -> None:
        held, self._held = self._held, None
        if held is not None and self.fence is not None and self._release is not None:
            for done in self.fence.give_up(*held):  # once the copy out of the slot is done
                self._release(done)

    def give_back_finished(self) -> None:
        _release_finished(self.fence, self._release)

    def close(self) -> None:
        fence, self.fence = self.fence, None
        held, self._held = self._held, None
        if fence is not None:
            if held is not None:
                fence.give_up(*held)  # the batch in hand too
            fence.drain()
        if self._pinned is not None:
            self._pinned.close()  # waits for its copies; before the ring is unmapped
            self._pinned = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None


def _device_view(torch: Any, raw: Any, off: int, typ: str, shape: Any) -> Any:
    """An array of a slot copied to the GPU as bytes: a view of raw."""
    n = int(np.prod(shape))
    if typ == "|u1":
        return raw[off:off + n].reshape(shape)
    return raw[off:off + 4 * n].view(torch.int32).reshape(shape)


def _release_finished(fence: "Optional[_cuda.ReleaseFence[Held]]", release: Optional[Release]) -> None:
    """Hands back the fenced slots whose GPU work has finished, oldest first."""
    if fence is not None and release is not None:
        for done in fence.completed():
            release(done)


# Transport names, in the order error messages list them: the delivery of
# each, made from (copy, device, writable).
DELIVERIES: Dict[str, Callable[[bool, int, bool], Delivery]] = {
    "shm": ShmDelivery,
    "inline": InlineDelivery,
    "cuda": CudaDelivery,
    "shm-pinned": PinnedDelivery,
}
