"""Skipped ranges of steps: ``Loader.skip_steps(first, last)`` and the job
config's ``skip_steps``. The batches of a range are made and dropped by the
daemon, never yielded: the batch after step first - 1 is batch last + 1, and
``batch["step"]`` stays the data step. The daemon logs the ranges in the
rank's state (README, "Skipping steps"; docs/explain.md, "Skipped steps").

A loader knows the ranges of its session (the open's reply, and each
skip_steps' answer), so that it asks for the right step next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar

from ._proto import dataloader_pb2 as pb
from ._proto import dataloader_pb2_grpc as pb_grpc
from .errors import ConfigError, StateError, translate

if TYPE_CHECKING:  # both import this module, through config and _session
    from ._options import Options
    from ._session import Session

__all__ = ["Ranges", "Skipping", "check_skip_steps", "MAX_SKIPS"]

R = TypeVar("R")

Range = Tuple[int, int]

# Ranges a loader keeps to ask a reopened session again: as many as a state
# keeps pending (state.MaxSkipsPending).
MAX_SKIPS = 256


def check_skip_steps(value: object) -> List[Range]:
    """The config's skip_steps: [first, last] pairs of steps (from 1, first
    <= last), in step order, apart."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"config: 'skip_steps' must be a list of [first, last] pairs, got {value!r}")
    out: List[Range] = []
    for i, r in enumerate(value):
        if not isinstance(r, (list, tuple)) or len(r) != 2 or any(isinstance(s, bool) or not isinstance(s, int) for s in r):
            raise ConfigError(f"config: skip_steps[{i}] must be a [first, last] pair of steps, got {r!r}")
        out.append(check_range(f"config: skip_steps[{i}]", int(r[0]), int(r[1])))
        if i > 0 and out[i][0] <= out[i - 1][1]:
            raise ConfigError(f"config: skip_steps[{i}] {list(r)} starts at or before the end of the range before it "
                              f"{list(out[i - 1])}: ranges must be in step order and must not overlap")
    return out


def check_range(where: str, first: int, last: int) -> Range:
    """One range of steps: from 1, first <= last."""
    if first < 1 or last < first:
        raise ConfigError(f"{where} [{first}, {last}]: want 1 <= first <= last")
    return first, last


class Ranges:
    """The ranges of steps a session skips, in step order."""

    def __init__(self, ranges: Iterable[Range] = ()):
        self._list: List[Range] = sorted(ranges)

    @classmethod
    def of(cls, wire: Sequence[pb.StepRange]) -> Ranges:
        return cls((r.first, r.last) for r in wire)

    def add(self, ranges: Iterable[Range]) -> None:
        """Adds ranges the daemon logged (those known already stay once)."""
        self._list = sorted(set(self._list) | set(ranges))

    def holding(self, step: int) -> Optional[Range]:
        """The range that holds step, if one does."""
        for r in self._list:
            if r[0] <= step <= r[1]:
                return r
        return None

    def following(self, step: int) -> int:
        """The step of the batch after step: step + 1, or past a range."""
        nxt = step + 1
        for first, last in self._list:
            if first <= nxt <= last:
                nxt = last + 1
        return nxt

    def preceding(self, step: int) -> int:
        """The step of the batch before step: step - 1, or before a range."""
        prev = step - 1
        for first, last in reversed(self._list):
            if first <= prev <= last:
                prev = first - 1
        return prev


class Skipping:
    """The Loader's half that skips ranges of steps. The Loader gives
    _open, _after_reconnect and _remember_skip, and the attributes below."""

    _stub: pb_grpc.LoaderStub
    _opts: Options
    _live: Optional[Session]
    _last_step: int
    _again: Any  # the batch given back (Positioning's Yielded), or None

    def _open(self) -> pb.OpenSessionResponse:
        raise NotImplementedError  # the Loader's

    def _after_reconnect(self, call: Callable[[], R]) -> R:
        raise NotImplementedError  # the Reconnecting half's

    def _remember_skip(self, first: int, last: int) -> None:
        raise NotImplementedError  # the Reconnecting half's

    @translate
    def skip_steps(self, first: int, last: int) -> None:
        """Skips the batches of steps ``first`` to ``last`` (both included):
        the daemon makes them and drops them, and the batch yielded after
        step first - 1 is batch last + 1 (``batch["step"]`` stays the data
        step, so ``dataloaderd explain`` and batch ids go on naming it).
        The range is logged in the rank's state (``dataloaderd inspect``
        shows it) and survives a save, a resume on any world size and a
        restart of the daemon. ``first`` must be after the last step
        yielded; batches the daemon made ahead for those steps are dropped
        and the rest made again. Every rank calls it with the same range (a
        group's consumers each call it). README, "Skipping steps"."""
        self._open()
        first, last = check_range("skip_steps", int(first), int(last))
        if first <= self._last_step:
            raise StateError(f"skip_steps({first}, {last}): this loader already yielded step {self._last_step}")
        again = self._again
        if again is not None and first <= again.step:
            raise StateError(f"skip_steps({first}, {last}): batch {again.step} was given back and is yielded again "
                             "as it was made; skip from a later step")

        def call() -> None:  # on the session open now: reopened if the daemon went away
            live = self._live
            assert live is not None
            resp = self._stub.SkipSteps(pb.SkipStepsRequest(
                session_id=live.reply.session_id, first=first, last=last, taken_step=self._last_step),
                timeout=self._opts.timeout)
            live.feed.drop_older(resp.generation, first - 1)
            live.skips.add([(r.first, r.last) for r in resp.pending])
        self._after_reconnect(call)
        self._remember_skip(first, last)
