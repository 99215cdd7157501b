"""How a session's batch announcements reach the loader, and how its releases
go back: the ring's control block, or messages on the Batches stream.

Both keep the Batches stream open: it is how the daemon learns that this
consumer is alive, and how it ends the session with a status. A feed knows
nothing of tensors; what a slot becomes is the delivery's concern
(dataloaderd._delivery).
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Callable, Iterator, List, NamedTuple, NoReturn, Optional, Protocol, Tuple, cast

import grpc

from . import _control
from ._proto import dataloader_pb2 as pb
from ._proto import dataloader_pb2_grpc as pb_grpc
from .errors import DaemonUnavailableError, from_rpc_error, translate

__all__ = ["Held", "Announced", "Release", "Feed", "ControlFeed", "StreamFeed", "open_feed"]


class Held(NamedTuple):
    """A slot the loader holds, as a release names it."""

    slot: int
    step: int
    wait_ns: int  # how long next() waited for it, reported to the daemon's histogram


class Announced(NamedTuple):
    """The daemon's word that a slot holds the next batch."""

    held: Held
    lines: int
    data: bytes  # the batch itself on the inline transport; empty otherwise
    segments: int = 0  # with cu_seqlens: the batch's segments
    max_seqlen: int = 0  # and the longest one's length


Release = Callable[[Held], None]
# Called by a feed while it waits for a batch (slots whose GPU work finished go
# back), and when batch_timeout passes (with the last step the daemon announced,
# when the feed knows it); the latter raises.
Idle = Callable[[], None]
TimeOut = Callable[[Optional[int]], NoReturn]


class Feed(Protocol):
    """Where announcements come from and releases go."""

    def start(self) -> None:
        """Opens the Batches stream, once, when the first batch is asked for."""

    def next(self, want: int, idle: Idle, time_out: TimeOut) -> Optional[Announced]:
        """Waits for step ``want``; None when the iteration ended before it."""

    def release(self, held: Held) -> None:
        """Gives a slot back to the daemon."""

    def drop_older(self, generation: int, after: int) -> None:
        """A change of weights from the batch after step ``after`` returned
        ``generation``: the batches past that step of an older generation
        (made before the change, and made again since), and their end, are
        to be dropped, not yielded; those up to it stay good."""

    def close(self) -> None:
        """Ends the stream (the daemon then reclaims the session) and unmaps
        what the feed mapped."""


class _Responses(Protocol):
    """A Batches call: an iterator of batch messages that is also a future
    (grpc's stream call object is both; its stub only says the former)."""

    def __next__(self) -> pb.Batch: ...

    def __iter__(self) -> Iterator[pb.Batch]: ...

    def cancel(self) -> bool: ...

    def done(self) -> bool: ...


class _BatchStream:
    """One consumer's Batches call: requests queued here, responses read by the feed."""

    def __init__(self, stub: pb_grpc.LoaderStub, session: pb.OpenSessionResponse, shm_control: bool):
        self.requests: queue.Queue[Optional[pb.BatchesRequest]] = queue.Queue()
        self.requests.put(pb.BatchesRequest(attach=pb.Attach(
            session_id=session.session_id, consumer=session.consumer, shm_control=shm_control)))
        self.responses = cast(_Responses, stub.Batches(_requests_from(self.requests)))

    def release(self, held: Held) -> None:
        self.requests.put(pb.BatchesRequest(release=pb.Release(slot=held.slot, step=held.step,
                                                               wait_ns=held.wait_ns)))

    def close(self) -> None:
        """Ends the call. The feed then drops this object, so that the call is
        freed now: freed while the interpreter finalizes (a loader closed at
        exit and still referenced by a suspended iterator), its __del__ would
        wait on a lock that a gRPC thread frozen by finalization may hold."""
        self.requests.put(None)
        self.responses.cancel()

    @translate
    def failure(self) -> NoReturn:
        """Raises what ended the stream: the daemon's status."""
        try:
            for msg in self.responses:
                if msg.end:
                    break
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err
        raise DaemonUnavailableError("the daemon closed the session")


def _requests_from(q: queue.Queue[Optional[pb.BatchesRequest]]) -> Iterator[pb.BatchesRequest]:
    """The request side of a Batches stream: what the loader queues, until None."""
    while True:
        msg = q.get()
        if msg is None:
            return
        yield msg


class ControlFeed:
    """Announcements read from the ring's control block, releases written
    there: no message per batch. The stream stays open beside it."""

    def __init__(self, control: _control.Control, stub: pb_grpc.LoaderStub, session: pb.OpenSessionResponse,
                 batch_timeout: Optional[float]):
        self.control = control
        self._stub, self._session, self._batch_timeout = stub, session, batch_timeout
        self._stream: Optional[_BatchStream] = None

    def start(self) -> None:
        if self._stream is None:
            self._stream = _BatchStream(self._stub, self._session, shm_control=True)

    def next(self, want: int, idle: Idle, time_out: TimeOut) -> Optional[Announced]:
        ctl, stream = self.control, self._stream
        assert stream is not None, "start() first"
        start = time.perf_counter_ns()
        deadline = None if self._batch_timeout is None else time.monotonic() + self._batch_timeout
        while True:
            state, got = ctl.poll(want)
            if got is not None:
                break
            if deadline is not None and time.monotonic() > deadline:
                time_out(ctl.published())
            if state == _control.ENDED:
                return None
            if state != _control.RUNNING:
                stream.failure()
            idle()
            ctl.wait(want, 0.05)
            if stream.responses.done():
                stream.failure()
        wait_ns = time.perf_counter_ns() - start
        slot, lines, segments, max_seqlen = got
        return Announced(Held(slot, want, wait_ns), lines, b"", segments, max_seqlen)

    def release(self, held: Held) -> None:
        self.control.release(held.step, held.wait_ns)

    def drop_older(self, generation: int, after: int) -> None:
        pass  # the daemon takes the announcements of remade batches back in the block

    def close(self) -> None:
        stream, self._stream = self._stream, None  # see _BatchStream.close
        if stream is not None:
            stream.close()
        self.control.close()


class StreamFeed:
    """Announcements and releases as messages on the Batches stream (fast=False,
    other platforms, the inline transport, rings this process cannot map).

    A watcher thread enforces batch_timeout: it cancels the stream when
    next() has waited longer, and next() then calls time_out."""

    def __init__(self, stub: pb_grpc.LoaderStub, session: pb.OpenSessionResponse, batch_timeout: Optional[float]):
        self._stub, self._session = stub, session
        self.batch_timeout = batch_timeout
        self._stream: Optional[_BatchStream] = None
        self.waiting_since: Optional[float] = None  # monotonic, while next() waits on a message
        self.timed_out = False
        self.closed = False
        # Changes of weights whose generation the stream has not shown yet:
        # (generation, after step); a message of an older generation past
        # one's step was made again.
        self._changes: List[Tuple[int, int]] = []

    def start(self) -> None:
        if self._stream is not None:
            return
        self._stream = _BatchStream(self._stub, self._session, shm_control=False)
        self.timed_out = False
        if self.batch_timeout is not None:
            threading.Thread(target=_watch, args=(weakref.ref(self), self._stream.responses, self.batch_timeout),
                             name="dataloaderd-batch-timeout", daemon=True).start()

    def next(self, want: int, idle: Idle, time_out: TimeOut) -> Optional[Announced]:
        stream = self._stream
        assert stream is not None, "start() first"
        idle()
        start = time.perf_counter_ns()
        self.waiting_since = time.monotonic()
        try:
            msg = next(stream.responses)
            while self._remade(msg):
                msg = next(stream.responses)
        except grpc.RpcError as err:
            if self.timed_out:
                time_out(None)
            raise from_rpc_error(err) from err
        except StopIteration:
            raise DaemonUnavailableError("the daemon ended the batch stream") from None
        finally:
            self.waiting_since = None
        wait_ns = time.perf_counter_ns() - start
        if msg.end:
            return None
        return Announced(Held(msg.slot, msg.step, wait_ns), msg.lines, msg.data, msg.segments, msg.max_seqlen)

    def release(self, held: Held) -> None:
        assert self._stream is not None, "start() first"
        self._stream.release(held)

    def drop_older(self, generation: int, after: int) -> None:
        self._changes.append((generation, after))

    def _remade(self, msg: pb.Batch) -> bool:
        """Whether msg was made before a change of weights and made again
        since (the end too: the batches made again and their end follow).
        The batches up to a change's step were not: those the daemon had
        sent before it stay good. Messages come in generation order, so the
        changes of msg's generation or older matter no more."""
        self._changes = [c for c in self._changes if c[0] > msg.generation]
        return any(msg.step > after for _, after in self._changes)

    def close(self) -> None:
        self.closed = True
        stream, self._stream = self._stream, None  # see _BatchStream.close
        if stream is not None:
            stream.close()


def _watch(ref: weakref.ref[StreamFeed], responses: _Responses, timeout: float) -> None:
    """Cancels a message-mode batch stream whose next() has waited longer than
    batch_timeout; the feed then reports the time-out. Ends with the stream,
    or when the feed is closed or gone."""
    while True:
        feed = ref()
        if feed is None or feed.closed or responses.done():
            return
        since = feed.waiting_since
        if since is not None and time.monotonic() - since > timeout:
            if feed.waiting_since is since:  # else the batch came meanwhile
                feed.timed_out = True  # before the cancel that the waiting next() sees
                responses.cancel()
                return
        del feed
        time.sleep(min(1.0, timeout / 4))


def open_feed(stub: pb_grpc.LoaderStub, session: pb.OpenSessionResponse, fast: bool,
              batch_timeout: Optional[float]) -> Feed:
    """The control block's feed when this session has one this process may use,
    else the stream's."""
    control = _map_control(session, fast)
    if control is None:
        return StreamFeed(stub, session, batch_timeout)
    return ControlFeed(control, stub, session, batch_timeout)


def _map_control(s: pb.OpenSessionResponse, fast: bool) -> Optional[_control.Control]:
    """The session's control block, or None when batches come by messages
    (fast=False, another platform, an older daemon, or a block this
    process may not map)."""
    path, size = s.ring.control_path, s.ring.control_bytes
    if not path and s.transport == pb.TRANSPORT_SHM:
        path, size = s.ring.path, s.ring.data_offset  # a daemon from before control_path
    if not (fast and path and size > 0 and _control.supported()):
        return None
    try:
        return _control.Control(path, size, s.consumer)
    except (OSError, ValueError):
        return None  # e.g. another user's ring
