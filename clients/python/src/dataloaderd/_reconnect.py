"""How a Loader rides through a daemon restart (``reconnect_timeout``).

The loader keeps its rank's state every ``RECOVERY_STEPS`` batches and the
``set_weights`` and ``skip_steps`` calls made since (Recovery). When the daemon goes away (a
batch, a save, a state or a change of weights fails with
DaemonUnavailableError: no daemon answers, or a restarted one says the
session is of its earlier run) it waits for the daemon to come back, opens
the session again from the kept state moved on to the last step yielded
(OpenArgs: the reopen's arguments, given explicitly; the user's resume point
is left as it is), makes the kept changes again, and the call goes on there.
A supervisor's restart is then not a training restart: the batches equal
those of a daemon that never died. A call that needs no session (the state
template) waits for the daemon the same way, on a new connection.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple, TypeVar

import grpc

from ._feed import Announced
from ._options import Options
from ._proto import dataloader_pb2 as pb
from ._proto import dataloader_pb2_grpc as pb_grpc
from ._session import Session
from .errors import DaemonUnavailableError, from_rpc_error

__all__ = ["OpenArgs", "Changes", "Recovery", "Reconnecting", "connect", "MAX_CHANGES", "RECOVERY_STEPS",
           "recovery_steps"]

R = TypeVar("R")

# set_weights calls a loader keeps, to make them again on a reopened session:
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


@dataclass(frozen=True)
class OpenArgs:
    """What an OpenSession starts from, beside the loader's own fields: the
    user's resume point (a folder, version 1 states or a sharded state), and
    for a session reopened on a restarted daemon how long it was away, the
    step to move past (one consumer) or the consumer's own last step (a
    group's). ``fresh``: start the rank over even where the daemon keeps
    the session of a process of it that died (--keep-detached)."""

    resume_from: str = ""
    resume_states: Tuple[bytes, ...] = ()
    resume_sharded: Optional[pb.ShardedState] = None
    reconnected_after_ns: int = 0
    skip_to_step: int = 0
    reconnect_step: int = 0
    fresh: bool = False

    def resumes(self) -> bool:
        """Whether the session starts from a saved state."""
        return bool(self.resume_from or self.resume_states or self.resume_sharded is not None)

    def fields(self) -> Dict[str, Any]:
        """The OpenSessionRequest fields of these arguments."""
        return {"resume_from": self.resume_from, "resume_states": list(self.resume_states),
                "resume_sharded": self.resume_sharded, "reconnected_after_ns": self.reconnected_after_ns,
                "skip_to_step": self.skip_to_step, "reconnect_step": self.reconnect_step, "fresh": self.fresh}


class Changes:
    """The set_weights calls a reopened session must be given again: (after
    step, weights), those from the step of the state it would reopen from
    on. A change before that step is in the state's own log."""

    def __init__(self) -> None:
        self._list: List[Tuple[int, Dict[str, float]]] = []

    def add(self, after: int, weights: Dict[str, float]) -> None:
        """A change the daemon took: it replaces those for its step and after."""
        self._list = [c for c in self._list if c[0] < after][-(MAX_CHANGES - 1):] + [(after, dict(weights))]

    def since(self, step: int) -> List[Tuple[int, Dict[str, float]]]:
        """The changes from step on: what a session opened at step lacks."""
        return [c for c in self._list if c[0] >= step]

    def forget_before(self, step: int) -> None:
        """Drops the changes a state kept at step holds."""
        self._list = self.since(step)


class Recovery:
    """What a loader keeps to reopen its session on a restarted daemon: the
    rank's state at two recent steps (one consumer reopens from the latest;
    a group's consumers, a step or two apart, from the one before, which
    every consumer has read past), the changes since, and a count."""

    def __init__(self, timeout: float, consumers: int):
        self.timeout, self.consumers = timeout, consumers
        self.latest: Optional[Tuple[int, pb.ShardedState]] = None
        self.before: Optional[Tuple[int, pb.ShardedState]] = None
        self.changes = Changes()
        # skip_steps ranges taken, to ask a reopened session again (those
        # its state logs already are no change).
        self.skips: List[Tuple[int, int]] = []
        self.reconnects = 0
        # A reconnect that gave up: the step after which the loader's next
        # batch lies, and when the daemon went. The next open goes on from
        # there, not from the user's resume point.
        self.lost: Optional[Tuple[int, float]] = None

    def on(self) -> bool:
        """Whether a lost daemon is waited for (reconnect_timeout > 0)."""
        return self.timeout > 0

    def forget(self) -> None:
        """Drops the kept states and changes: they belong to a run the loader
        no longer reads (load_state_dict)."""
        self.latest = self.before = None
        self.changes = Changes()
        self.skips = []
        self.lost = None

    def keep(self, step: int, sharded: pb.ShardedState) -> None:
        """Keeps the rank's state at step."""
        self.before, self.latest = self.latest, (step, sharded)
        state = self._state()
        if state is not None:
            self.changes.forget_before(state[0])

    def drop_from(self, step: int) -> None:
        """Drops the kept states at step and after: the batch of step was
        given back (not taken), and a reopen must yield it again."""
        if self.before is not None and self.before[0] >= step:
            self.before = None
        if self.latest is not None and self.latest[0] >= step:
            self.latest = self.before  # a group reopens from before: it stays when older

    def _state(self) -> Optional[Tuple[int, pb.ShardedState]]:
        return self.latest if self.consumers == 1 else self.before

    def reopen_args(self, resume: OpenArgs, last: int, away_s: float) -> OpenArgs:
        """The arguments of a session reopened after away_s seconds without
        a daemon, whose next batch is the one after step last: from the kept
        state, else the user's resume point."""
        state = self._state()
        start = resume if state is None else OpenArgs(resume_sharded=state[1])
        return replace(start, reconnected_after_ns=int(away_s * 1e9),
                       skip_to_step=last if self.consumers == 1 else 0,
                       reconnect_step=last if self.consumers > 1 else 0)


def _gone(err: grpc.RpcError) -> bool:
    """Whether a call failed because the daemon went away."""
    return isinstance(from_rpc_error(err), DaemonUnavailableError)


class Reconnecting:
    """The Loader's half that reopens its session on a restarted daemon.
    The Loader sets the attributes declared here and gives _open_session,
    _close_session and _time_out."""

    socket: str
    _opts: Options
    _channel: grpc.Channel
    _stub: pb_grpc.LoaderStub
    _live: Optional[Session]
    _last_step: int
    _closed: bool
    _resume: OpenArgs  # the user's resume point
    _recovery: Recovery

    def _open_session(self, args: OpenArgs, run: object) -> Session:
        raise NotImplementedError  # the Loader's

    def _close_session(self, tell_daemon: bool = True) -> None:
        raise NotImplementedError  # the Loader's

    def _time_out(self, published: Optional[int]) -> NoReturn:
        raise NotImplementedError  # the Loader's

    @property
    def reconnects(self) -> int:
        """How many times this loader reopened its session on a restarted daemon."""
        return self._recovery.reconnects

    def _keep_recovery(self, live: Session) -> None:
        """Keeps the rank's state at the last yielded step, for a session
        reopened on a restarted daemon (best effort: a daemon already gone
        leaves the previous one)."""
        try:
            resp = self._stub.GetState(pb.GetStateRequest(session_id=live.reply.session_id, step=self._last_step),
                                       timeout=self._opts.timeout)
        except grpc.RpcError:
            return
        self._recovery.keep(self._last_step, resp.sharded)

    def _remember_change(self, after: int, weights: Dict[str, float]) -> None:
        """Keeps a change of weights the daemon took, for a session reopened later."""
        self._recovery.changes.add(after, weights)
        if self._recovery.on() and self._live is not None:
            self._keep_recovery(self._live)  # a reopened session must know the change

    def _remember_skip(self, first: int, last: int) -> None:
        """Keeps a skipped range the daemon took, for a session reopened later."""
        self._recovery.skips = [r for r in self._recovery.skips if r[1] > self._last_step][-(MAX_CHANGES - 1):] \
            + [(first, last)]
        if self._recovery.on() and self._live is not None:
            self._keep_recovery(self._live)  # a reopened session must know the range

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
                if not _gone(err) or not self._recovery.on() or live is None or self._closed:
                    raise
                since = time.monotonic() if since is None else since
                if time.monotonic() - since > self._recovery.timeout:
                    raise
            self._reconnect(live)

    def _without_session(self, call: Callable[[pb_grpc.LoaderStub], R]) -> R:
        """call(stub) of a call that needs no session (StateTemplate), and
        while no daemon answers it, again until reconnect_timeout passes, as
        a session's calls wait (_after_reconnect). Without a session it asks
        on a new connection each time (a broken one waits out its backoff);
        an open session keeps its connection, for its own reopen."""
        since = time.monotonic()
        while True:
            try:
                return call(self._stub)
            except grpc.RpcError as err:
                if not _gone(err) or not self._recovery.on() or self._closed \
                        or time.monotonic() - since > self._recovery.timeout:
                    raise
            time.sleep(0.01)
            if self._live is None:
                self._channel.close()
                self._channel, self._stub = connect(self.socket)

    def _reconnect(self, live: Session) -> Session:
        """The daemon went away: waits up to reconnect_timeout for it to come
        back (a supervisor restarts it), opens the session again from the
        kept state, moved on to the last step yielded (by the daemon, or for
        a group's consumer by reading up to it: the same batches, the stream
        being a function of the state) and returns the new session, whose
        next batch is the one the old would have given."""
        lost, last = time.monotonic(), self._last_step
        self._live = None
        try:
            live.delivery.close()
        finally:
            live.feed.close()
        return self._reopen_within(last, lost, lost, live.run)

    def _reopen_within(self, last: int, lost: float, since: float, run: object) -> Session:
        """_reopen until it succeeds (a new connection can wait out gRPC's
        backoff of the one before) or reconnect_timeout passes from since;
        then the loader's position is kept as lost, for the next open."""
        while True:
            try:
                new = self._reopen(last, lost, run)
                break
            except DaemonUnavailableError:
                pass
            except grpc.RpcError as err:  # the daemon went again while the session reopened
                if not _gone(err):
                    raise from_rpc_error(err) from err
            self._close_session()  # what reopened before it went again
            self._last_step = last
            if time.monotonic() > since + self._recovery.timeout:
                self._recovery.lost = (last, lost)  # the next open (state_dict, save, iter) goes on from last
                raise DaemonUnavailableError(
                    f"the daemon at {self.socket} went away and did not come back within "
                    f"reconnect_timeout={self._recovery.timeout:g} s; resume from the last checkpoint") from None
            time.sleep(0.01)
        self._recovery.lost = None
        self._recovery.reconnects += 1
        return new

    def _open_lost(self, run: object) -> Session:
        """Opens the session of a loader whose reconnect gave up, where it
        was: from the kept state, moved on to the last step yielded, with
        the kept changes made again, waiting for the daemon up to
        reconnect_timeout as a reconnect does."""
        assert self._recovery.lost is not None
        last, lost = self._recovery.lost
        return self._reopen_within(last, lost, time.monotonic(), run)

    def _reopen(self, last: int, lost: float, run: object) -> Session:
        """One try at opening the session again on a new connection, moved
        on to step last, with the kept changes made again."""
        self._channel.close()
        self._channel, self._stub = connect(self.socket)
        new = self._open_session(self._recovery.reopen_args(self._resume, last, time.monotonic() - lost), run)
        for after, weights in self._recovery.changes.since(self._last_step):  # made since the state reopened from
            self._stub.SetWeights(pb.SetWeightsRequest(
                session_id=new.reply.session_id, after_step=after, taken_step=self._last_step,
                weights=weights), timeout=self._opts.timeout)
        for first, final in self._recovery.skips:  # taken since; those its state logs are no change
            if first > self._last_step:
                resp = self._stub.SkipSteps(pb.SkipStepsRequest(
                    session_id=new.reply.session_id, first=first, last=final, taken_step=self._last_step),
                    timeout=self._opts.timeout)
                new.skips.add([(r.first, r.last) for r in resp.pending])
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
        return live.feed.next(live.skips.following(self._last_step), live.delivery.give_back_finished, self._time_out)
