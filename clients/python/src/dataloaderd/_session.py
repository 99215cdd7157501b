"""A Loader's open session: the daemon's reply, how its batches are
announced (feed) and how a slot becomes arrays (delivery); and how one is
opened and closed."""

from __future__ import annotations

from typing import Optional, Tuple

import grpc

from . import _control, _cuda
from ._delivery import DELIVERIES, CudaDelivery, Delivery, PinnedDelivery
from ._feed import ControlFeed, Feed, Held, open_feed
from ._options import Options
from ._proto import dataloader_pb2 as pb
from ._proto import dataloader_pb2_grpc as pb_grpc
from ._skips import Ranges
from .batch import Buffers, batch_id

__all__ = ["Session", "open_session", "close_session"]


class Session:
    """An open session. ``run`` names the iteration it serves: a session
    reopened on a restarted daemon keeps its predecessor's, one opened
    otherwise (a new loader, load_state_dict) has its own. ``ended``: its
    rank's last batch was yielded. ``buffers``: the host arrays of its
    batches' int64 keys. ``rank``: its (dp_rank, dp_size), which name its
    batches (batch_id). ``skips``: the ranges of steps it skips (its
    reply's, and those skip_steps added), whence the step of its next batch."""

    __slots__ = ("reply", "feed", "delivery", "run", "ended", "buffers", "rank", "skips")

    def __init__(self, reply: pb.OpenSessionResponse, feed: Feed, delivery: Delivery, run: object,
                 rank: Tuple[int, int] = (0, 1)):
        self.reply, self.feed, self.delivery, self.run = reply, feed, delivery, run
        self.ended = False
        self.buffers = Buffers()  # the int64 keys' arrays of its batches
        self.rank = rank
        self.skips = Ranges.of(reply.skips)

    def batch_id(self, step: int) -> str:
        """The id of this session's batch of step (batch.batch_id): "" from
        a daemon that gives no job fingerprint."""
        return batch_id(self.reply.job_fingerprint, step, *self.rank)

    @property
    def control(self) -> Optional[_control.Control]:
        """The control block batches are announced in, or None (messages)."""
        return self.feed.control if isinstance(self.feed, ControlFeed) else None

    @property
    def dev_ring(self) -> Optional[_cuda.IpcRing]:
        """The device ring of a cuda session, else None."""
        return self.delivery.ring if isinstance(self.delivery, CudaDelivery) else None

    @property
    def fence(self) -> Optional[_cuda.ReleaseFence[Held]]:
        """The release fence of a cuda or shm-pinned session, else None."""
        return self.delivery.fence if isinstance(self.delivery, (CudaDelivery, PinnedDelivery)) else None


def open_session(stub: pb_grpc.LoaderStub, request: pb.OpenSessionRequest, opts: Options, writable: bool,
                 run: object) -> Session:
    """Opens a session of request (its transport set here, from the
    delivery's) and maps what the reply describes. Nothing of the session
    stays when a step fails: the daemon is told to close it."""
    delivery = DELIVERIES[opts.transport](opts.copy, opts.device, writable)  # before the daemon makes a ring
    request.transport = delivery.wire
    reply = stub.OpenSession(request, timeout=opts.timeout)
    feed: Optional[Feed] = None
    try:
        feed = open_feed(stub, reply, opts.fast, opts.batch_timeout)
        delivery.open(reply, feed.release)
        # Attached now, not at the first batch: a session opened by save(),
        # set_weights() or seek() and read minutes later (a heal, a model
        # build) would be reclaimed after --attach-within as one whose
        # consumer never came, though its process holds it.
        feed.start()
    except Exception:  # torch's own errors too: nothing of the session may stay
        delivery.close()
        if feed is not None:
            feed.close()
        stub.CloseSession(pb.CloseSessionRequest(session_id=reply.session_id, consumer=reply.consumer),
                          timeout=opts.timeout)
        raise
    return Session(reply, feed, delivery, run, (request.dp_rank, request.dp_size))


def close_session(stub: pb_grpc.LoaderStub, live: Session, timeout: float, tell_daemon: bool) -> None:
    """Lets go of a session's delivery (on the GPU, after the kernels still
    reading device slots), tells the daemon (best effort) and ends the feed."""
    live.delivery.close()
    try:
        if tell_daemon:
            stub.CloseSession(pb.CloseSessionRequest(session_id=live.reply.session_id, consumer=live.reply.consumer),
                              timeout=timeout)
    except grpc.RpcError:
        pass  # the daemon reclaims a session whose stream ends anyway
    live.feed.close()
