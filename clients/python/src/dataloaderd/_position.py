"""Where a Loader's next batch lies, as its trainer decides: a batch given
back (a step the trainer did not commit: torchft's ``should_commit()`` is
False) is yielded again, and ``seek`` moves the loader forward to a given
step. docs/rank-restart.md, "Data step and trainer step".

A batch given back is not released to the daemon where the transport
still holds its slot (``shm``, ``inline``, and ``cuda`` without ``copy``): a
process that dies after giving it back leaves it unreleased, and its
replacement gets it again (--keep-detached). The transports that release a
slot once it is copied to the GPU (``shm-pinned``, ``cuda`` with ``copy``)
yield the process's own copy again; a death then loses it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from ._feed import Announced
from ._options import Options
from ._proto import dataloader_pb2 as pb
from ._proto import dataloader_pb2_grpc as pb_grpc
from ._reconnect import OpenArgs, Recovery
from ._session import Session
from .errors import StateError, translate

__all__ = ["Yielded", "Positioning"]

# A seek reads the batches it passes (taken and given back, as a trainer
# would) when they are at most this many rings ahead; farther, a session of
# one consumer is opened again at the step, the daemon moving its cursors
# without making the batches between.
READ_RINGS = 2


class Yielded(NamedTuple):
    """The last batch a loader yielded, as it may be yielded again: its
    tokens and metadata arrays (views of a held slot, or the process's own
    copy), for the session it came from. ``padding``: a padding batch
    (end="pad"), made again from nothing."""

    step: int
    session: Optional[Session]
    tokens: Any = None
    arrays: Any = None
    max_seqlen: int = 0
    padding: bool = False


class Positioning:
    """The Loader's half that gives batches back and seeks. The Loader sets
    the attributes declared here and gives _open, _open_session,
    _close_session, _next_announced and _keep_recovery."""

    _opts: Options
    _stub: pb_grpc.LoaderStub
    _live: Optional[Session]
    _last_step: int
    _recovery: Recovery
    # The last batch yielded (None once given back or passed by a seek), and
    # the batch given back, yielded next.
    _yielded: Optional[Yielded] = None
    _again: Optional[Yielded] = None
    # A seek met the rank's end: the iteration ends (or pads) next.
    _end_met: bool = False

    def _open(self) -> pb.OpenSessionResponse:
        raise NotImplementedError  # the Loader's

    def _open_session(self, args: OpenArgs, run: object) -> Session:
        raise NotImplementedError  # the Loader's

    def _close_session(self, tell_daemon: bool = True) -> None:
        raise NotImplementedError  # the Loader's

    def _next_announced(self, live: Session) -> Optional[Announced]:
        raise NotImplementedError  # the Reconnecting half's

    def _keep_recovery(self, live: Session) -> None:
        raise NotImplementedError  # the Reconnecting half's

    def give_back(self) -> None:
        """The last batch yielded was not trained on: the next one yielded is
        that batch again (the same step and tokens), and ``step``, ``save``
        and ``state_dict`` count it as not taken. For a step the trainer did
        not commit (torchft's ``should_commit()`` returned False). Only the
        last batch yielded, once."""
        y, live = self._yielded, self._live
        ended = live is None or (live.ended and not y.padding) if y is not None else True
        if y is None or y.step != self._last_step or ended:
            raise StateError("give_back: no batch to give back: only the last batch yielded, once, and not one a "
                             "seek, a resume or a new session passed")
        self._yielded = None
        self._last_step = y.step - 1 if y.padding or y.session is None else y.session.skips.preceding(y.step)
        self._recovery.drop_from(y.step)  # a reconnect must not reopen past it
        if not y.padding:  # padding is made again from the step
            self._again = y

    def _take_again(self, live: Session) -> Optional[Yielded]:
        """The batch given back, to yield now, if it is of the live session
        (a session opened since serves it itself)."""
        y, self._again = self._again, None
        if y is None or y.session is not live:
            return None
        self._last_step = y.step
        self._yielded = y
        return y

    def _forget_given_back(self) -> None:
        """A new session serves the next batch: the one given back (its
        step not taken) comes from it."""
        self._again = None
        self._yielded = None

    @translate
    def seek(self, step: int) -> None:
        """Moves the loader forward so that the next batch it yields is
        batch ``step`` (the batches between are passed, counted as taken,
        as if the trainer had read them): exact, on any transport. A step
        at or before the last one yielded is refused (a resume point goes
        back: ``resume_from``, ``load_state_dict``). Past the rank's last
        batch the iteration ends, or with end="pad" pads from ``step`` on.
        A group's consumers (``consumers`` > 1)
        each seek to the same step."""
        self._open()
        target = int(step)
        live = self._live
        assert live is not None
        if live.ended or self._end_met:  # past the rank's last batch
            if target <= self._last_step:
                raise StateError(f"seek({target}): the next batch is {self._last_step + 1}; a seek only moves forward")
            if self._opts.end == "pad":
                self._last_step = target - 1  # padding goes on at the step asked for
            self._yielded = None
            return
        again = self._again
        if again is not None and target > again.step:  # passed over: taken
            self._again = None
            self._last_step = again.step
        if target <= self._last_step or (again is not None and target < again.step):
            raise StateError(f"seek({target}): the next batch is {self._last_step + 1}; a seek only moves "
                             "forward (resume_from or load_state_dict go back)")
        self._yielded = None
        near = READ_RINGS * max(1, live.reply.ring.slots)
        if self._opts.consumers == 1 and target - 1 - self._last_step > near:
            self._seek_reopen(target - 1)
        if not self._read_through(target) and self._opts.end == "pad":
            self._last_step = target - 1  # padding from the step asked for, as on every rank

    def _read_through(self, target: int) -> bool:
        """Takes the batches before step target, as a trainer would, and
        gives each back to the daemon; False when the rank's end came first
        (the end is met)."""
        live = self._live
        assert live is not None
        live.feed.start()
        while live.skips.following(self._last_step) < target:
            got = self._next_announced(live)
            if got is None:
                self._end_met = True
                return False
            live.delivery.take(got)
            self._last_step = got.held.step
        return True

    def _seek_reopen(self, last: int) -> None:
        """Moves a session of one consumer to step last by opening it again
        from its state now, the daemon skipping to last without making the
        batches between (at most max_skip_steps a time)."""
        while self._last_step < last:
            live = self._live
            assert live is not None
            sharded = self._stub.GetState(pb.GetStateRequest(session_id=live.reply.session_id, step=self._last_step),
                                          timeout=self._opts.timeout).sharded
            hop = min(last, self._last_step + max(1, live.reply.max_skip_steps or 1))
            run = live.run
            self._close_session()
            new = self._open_session(OpenArgs(resume_sharded=sharded, skip_to_step=hop), run)
            new.feed.start()
            if self._recovery.on():
                self._keep_recovery(new)  # a restarted daemon reopens from here
            if self._last_step < hop:
                return  # the rank ends before it: the reads meet the end
