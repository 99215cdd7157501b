"""How a Loader rides through a daemon restart (``reconnect_timeout``).

The loader keeps its rank's state every ``RECOVERY_STEPS`` batches and
remembers its ``set_weights`` calls. When the daemon goes away (a batch, a
save, a state or a change of weights fails with DaemonUnavailableError: no
daemon answers, or a restarted one says the session is of its earlier run)
it waits for the daemon to come back, opens the session again from the kept
state moved on to the last step yielded, makes the remembered changes again,
and the call goes on there. A supervisor's restart is then not a training
restart: the batches equal those of a daemon that never died.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, NoReturn, Optional, Tuple, TypeVar

import grpc

from ._delivery import Delivery
from ._feed import Announced, Feed
from ._proto import dataloader_pb2 as pb
from ._proto import dataloader_pb2_grpc as pb_grpc
from .errors import DaemonUnavailableError, from_rpc_error

__all__ = ["Session", "Reconnecting", "connect", "MAX_CHANGES", "RECOVERY_STEPS", "recovery_steps"]

R = TypeVar("R")

# set_weights calls a loader remembers, to make them again on a reopened session:
# as many as the daemon queues for later steps (state.MaxQueued), which the state
# a session reopens from carries too.
MAX_CHANGES = 256

# Batches between refreshes of the state a reconnect resumes from: a reopened
# session takes at most this many batches again.
RECOVERY_STEPS = 32


def recovery_steps(reply: pb.OpenSessionResponse) -> int:
    """Batches between refreshes of the state a reconnect resumes from, for
    a session: RECOVERY_STEPS, fewer when the daemon says it skips fewer
    batches of this size at a reopen (max_skip_steps; a group's consumers
    may reopen from the refresh before the last, so half of it)."""
    if reply.max_skip_steps == 0:  # a daemon from before the field
        return RECOVERY_STEPS
    return max(1, min(RECOVERY_STEPS, reply.max_skip_steps // 2))


def connect(path: str) -> Tuple[grpc.Channel, pb_grpc.LoaderStub]:
    """A channel to the daemon's socket, and its stub."""
    channel = grpc.insecure_channel("unix://" + path, options=[
        ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
    return channel, pb_grpc.LoaderStub(channel)


class Session:
    """An open session: the daemon's reply, how its batches are announced
    (feed) and how a slot becomes tokens (delivery)."""

    __slots__ = ("reply", "feed", "delivery", "reopened_as")

    def __init__(self, reply: pb.OpenSessionResponse, feed: Feed, delivery: Delivery):
        self.reply, self.feed, self.delivery = reply, feed, delivery
        # The session that took this one's place on a restarted daemon.
        self.reopened_as: Optional[Session] = None


def _gone(err: grpc.RpcError) -> bool:
    """Whether a call failed because the daemon went away."""
    return isinstance(from_rpc_error(err), DaemonUnavailableError)


class Reconnecting:
    """The Loader's half that reopens its session on a restarted daemon: what
    it keeps for that and how it reopens. The Loader sets the attributes
    declared here and gives _open and _close_session."""

    socket: str
    _timeout: float
    _consumers: int
    _channel: grpc.Channel
    _stub: pb_grpc.LoaderStub
    _live: Optional[Session]
    _last_step: int
    _closed: bool
    _resume_from: str
    _resume_states: List[bytes]
    _resume_sharded: Optional[pb.ShardedState]
    _reopened_after: float  # seconds without a daemon, told to the next OpenSession
    _skip_to: int  # the step the next OpenSession moves past (reopening a session)
    _reconnect_step: int  # a group consumer's last step, told to the next OpenSession

    def _open(self) -> pb.OpenSessionResponse:
        raise NotImplementedError  # the Loader's

    def _close_session(self, tell_daemon: bool = True) -> None:
        raise NotImplementedError  # the Loader's

    def _init_reconnect(self, reconnect_timeout: float) -> None:
        self._reconnect_timeout = float(reconnect_timeout)
        # The state a session reopened on a restarted daemon resumes from:
        # (step, the rank's sharded state at that step), refreshed every
        # RECOVERY_STEPS batches; None: the session's own start.
        self._recovery: Optional[Tuple[int, pb.ShardedState]] = None
        self._recovery_prev: Optional[Tuple[int, pb.ShardedState]] = None  # the one before (groups)
        self._changes: List[Tuple[int, Dict[str, float]]] = []  # set_weights calls: (after step, weights)
        self.reconnects = 0

    def _reconnects(self) -> bool:
        """Whether a lost daemon is waited for."""
        return self._reconnect_timeout > 0

    def _keep_recovery(self, live: Session) -> None:
        """Keeps the rank's state at the last yielded step, for a session
        reopened on a restarted daemon (best effort: a daemon already gone
        leaves the previous one)."""
        try:
            resp = self._stub.GetState(pb.GetStateRequest(session_id=live.reply.session_id, step=self._last_step),
                                       timeout=self._timeout)
        except grpc.RpcError:
            return
        self._recovery_prev, self._recovery = self._recovery, (self._last_step, resp.sharded)

    def _remember_change(self, after: int, weights: Dict[str, float]) -> None:
        """Remembers a change of weights the daemon took, for a session
        reopened later: it replaces those remembered for its step and after."""
        self._changes = [c for c in self._changes if c[0] < after][-(MAX_CHANGES - 1):] + [(after, weights)]
        if self._reconnects() and self._live is not None:
            self._keep_recovery(self._live)  # a reopened session must know the change

    def _after_reconnect(self, call: Callable[[], R]) -> R:
        """call(), and when the daemon went away (down, or restarted: it no
        longer knows the session), call() again on the session reopened on
        the restarted one, until reconnect_timeout passes without success.
        call() uses self._live, the session open now."""
        since: Optional[float] = None
        while True:
            try:
                return call()
            except grpc.RpcError as err:
                live = self._live
                if not _gone(err) or not self._reconnects() or live is None or self._closed:
                    raise
                since = time.monotonic() if since is None else since
                if time.monotonic() - since > self._reconnect_timeout:
                    raise
            self._reconnect(live)

    def _reconnect(self, live: Session) -> Session:
        """The daemon went away: waits up to reconnect_timeout for it to come
        back (a supervisor restarts it), opens the session again from the
        kept state, moved on to the last step yielded (by the daemon, or for
        a group's consumer by reading up to it: the same batches, the stream
        being a function of the state) and returns the new session, whose
        next batch is the one the old would have given."""
        lost = time.monotonic()
        last = self._last_step
        self._live = None
        try:
            live.delivery.close()
        finally:
            live.feed.close()
        # A group's consumers may be a step or two apart: the first back opens
        # the session from the state it kept before its latest, which every
        # consumer has read past, and each then reads up to its own step.
        kept = self._recovery if self._consumers == 1 else self._recovery_prev
        if kept is not None:
            self._resume_from, self._resume_states = "", []
            self._resume_sharded = kept[1]
        deadline = lost + self._reconnect_timeout
        while True:
            try:
                new = self._reopen(last, lost)
                break
            except DaemonUnavailableError:
                pass
            except grpc.RpcError as err:  # the daemon went again while the session reopened
                if not _gone(err):
                    raise from_rpc_error(err) from err
            self._close_session()  # what reopened before it went again
            self._last_step = last
            if time.monotonic() > deadline:
                raise DaemonUnavailableError(
                    f"the daemon at {self.socket} went away and did not come back within "
                    f"reconnect_timeout={self._reconnect_timeout:g} s; resume from the last checkpoint") from None
            time.sleep(0.01)
        self.reconnects += 1
        live.reopened_as = new
        return new

    def _reopen(self, last: int, lost: float) -> Session:
        """One try at opening the session again on a new connection, moved
        on to step last, with the remembered changes made again."""
        self._channel.close()
        self._channel, self._stub = connect(self.socket)
        self._reopened_after = time.monotonic() - lost
        self._skip_to = last if self._consumers == 1 else 0
        self._reconnect_step = last if self._consumers > 1 else 0
        self._open()
        new = self._live
        assert new is not None, "_open() sets the session"
        for after, weights in self._changes:  # made since the state reopened from: made again
            if after >= self._last_step:
                self._stub.SetWeights(pb.SetWeightsRequest(
                    session_id=new.reply.session_id, after_step=after, taken_step=self._last_step,
                    weights={k: float(v) for k, v in weights.items()}), timeout=self._timeout)
        new.feed.start()
        while self._last_step < last:  # a daemon that did not skip to it: take them again
            got = self._next_announced(new)
            if got is None:
                break
            new.delivery.take(got)
            self._last_step = got.held.step
        return new

    def _next_announced(self, live: Session) -> Optional[Announced]:
        """The announcement of the batch after the last one yielded."""
        live.delivery.give_back()
        return live.feed.next(self._last_step + 1, live.delivery.give_back_finished, self._time_out)

    def _time_out(self, published: Optional[int]) -> NoReturn:
        raise NotImplementedError  # the Loader's
