"""The Loader: one data-parallel rank's view of a dataloaderd session."""

from __future__ import annotations

import atexit
import os
import sys
import weakref
from typing import Any, Dict, Iterator, Mapping, NoReturn, Optional, Union, cast

import grpc

from . import _cuda, _state
from ._control import Control
from ._delivery import layout_of
from ._feed import Held
from ._job import default_job
from ._options import DTypeArg, End, Transport, check_options, check_rank, socket_path
from ._position import Positioning, Yielded
from ._proto import dataloader_pb2 as pb
from ._reconnect import OpenArgs, Reconnecting, Recovery, connect, recovery_steps
from ._session import Session, close_session, open_session
from ._skips import Skipping
from ._torchapi import Torch
from ._wrappers import refuse_stream_splitters
from .batch import Batch, make_batch, padding_arrays
from .config import check_weights, load_config, local_folder, to_proto
from .errors import BatchTimeoutError, DaemonUnavailableError, DataloaderdError, StateError, translate


def _optional_torch() -> Optional[Torch]:
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return cast(Torch, torch)  # torch's own annotations are far wider than the protocol


torch = _optional_torch()  # optional: without it batches are numpy arrays

__all__ = ["Loader"]

STATE_DICT_VERSION = _state.VERSION

# Loaders not closed yet. They are closed at exit, while gRPC's threads still
# run: closing a channel with a live stream during interpreter finalization
# blocks forever.
_open_loaders: "weakref.WeakSet[Loader]" = weakref.WeakSet()


@atexit.register
def _close_open_loaders() -> None:
    for loader in list(_open_loaders):
        try:
            loader.close()
        except Exception:
            pass


class Loader(Reconnecting, Positioning, Skipping):
    """Batches of packed token lines for one data-parallel rank.

    ``config`` is a dict or the path of a YAML/JSON file (keys in the README).
    ``dp_rank``/``dp_size`` default to torchrun's RANK/WORLD_SIZE, ``socket``
    to DATALOADERD_SOCKET. Processes of one tensor/pipeline-parallel group pass
    the same ``dp_rank`` and ``consumers=<group size>`` and read the same batches.

    Iterating yields :class:`Batch` dicts (``tokens``, ``input_ids``,
    ``labels``, ``shift_labels``, ``step``, ``lines``, ``padding`` and the
    metadata the config asks for: see Batch); ``input_ids``, ``labels`` and
    ``shift_labels`` are of ``dtype`` (int64 by default, writable; "int32":
    zero-copy views). Pass ``copy=True`` for a ``tokens`` you may keep and
    write.

    ``next()`` raises BatchTimeoutError when no batch comes within
    ``batch_timeout`` seconds (default 600; None waits forever), so a stuck
    daemon fails the step instead of hanging it.

    A rank restart is not a job restart: when a process dies without closing
    its loader, the daemon keeps its session (``--keep-detached``, default 5
    minutes), and a new process opening the same job and dp_rank with the same
    config and no ``resume_from`` goes on from the last batch the dead one
    released (``continued`` is then True). ``fresh=True`` (or a resume point)
    starts the rank over instead. ``give_back()`` yields the last batch again
    (a step the trainer did not commit), ``seek(step)`` moves forward to a
    step. docs/rank-restart.md. ``skip_steps(first, last)`` skips a range of
    steps (their batches made and dropped, never yielded), as the config's
    ``skip_steps`` does at a resume.
    """

    def __init__(self, config: Union[str, os.PathLike[str], Mapping[str, object]],
                 dp_rank: Optional[int] = None, dp_size: Optional[int] = None,
                 socket: Optional[str] = None, resume_from: Optional[Union[str, os.PathLike[str]]] = None,
                 transport: Transport = "shm", *, job: Optional[str] = None, consumers: int = 1,
                 slots: int = 0, copy: bool = False, timeout: float = 60.0, fast: bool = True,
                 device: Optional[int] = None, batch_timeout: Optional[float] = 600.0, dtype: DTypeArg = "int64",
                 end: End = "stop", reconnect_timeout: float = 60.0, fresh: bool = False):
        data, base = load_config(config)
        self._config = to_proto(data, base)
        self.dp_rank, self.dp_size = check_rank(dp_rank, dp_size)
        self._opts = check_options(transport, dtype, end, device, consumers, slots, copy, fast, timeout,
                                   batch_timeout, reconnect_timeout)
        self.job = job or default_job()  # see _job.py
        # The user's resume point; fresh: not the session a dead process of this rank left.
        self._resume = OpenArgs(resume_from=local_folder("resume_from", resume_from), fresh=bool(fresh))
        self._recovery = Recovery(self._opts.reconnect_timeout, consumers)  # see _reconnect.py
        self.socket = socket_path(socket)
        self._channel, self._stub = connect(self.socket)
        _open_loaders.add(self)
        self._live: Optional[Session] = None
        self._template: Optional[pb.ShardedState] = None  # the daemon's, fixed for config and rank: asked once
        self._last_step = 0
        # Whether _last_step is the resumed step before a session said so:
        # the step of a resume folder is the daemon's to read (OpenSession's
        # start_step); the client opens no rank file.
        self._step_known = not self._resume.resume_from
        self._closed = False

    @property
    def transport(self) -> Transport:
        """How batches reach this process (the argument)."""
        return self._opts.transport

    @property
    def continued(self) -> bool:
        """Whether the open session took the place of a process of this rank
        that died without closing: the loader goes on from the last batch that
        process released (it opens the session if none is open yet)."""
        return bool(self._open().continued)

    @property
    def device(self) -> int:
        """The CUDA device of the cuda and shm-pinned transports (LOCAL_RANK by default)."""
        return self._opts.device

    # -- session --------------------------------------------------------------

    @translate
    def _open(self) -> pb.OpenSessionResponse:
        """The open session's reply; opens one first if none is: where the
        loader was when a reconnect gave up, else from the user's resume point."""
        if self._live is None and self._recovery.lost is not None:
            self._open_lost(object())
        elif self._live is None:
            self._open_session(self._resume, object())
        assert self._live is not None
        return self._live.reply

    def _open_session(self, args: OpenArgs, run: object) -> Session:
        """Opens a session from args for the iteration run; it is the live one."""
        if self._closed:
            raise DataloaderdError("the loader is closed")
        # Zero-copy torch views of shm are copy-on-write: torch has no
        # read-only tensors, and a write into the ring's read-only mapping
        # would kill the process.
        writable = self._opts.dtype == "int32" and torch is not None
        request = pb.OpenSessionRequest(job=self.job, config=self._config, dp_rank=self.dp_rank, dp_size=self.dp_size,
                                        consumers=self._opts.consumers, slots=self._opts.slots,
                                        device=self._opts.device, **args.fields())
        self._live = open_session(self._stub, request, self._opts, writable, run)
        self._last_step, self._step_known = self._live.reply.start_step, True
        self._forget_given_back()  # this session serves the next batch
        self._end_met = False
        if self._live.reply.continued and self._recovery.on():
            self._keep_recovery(self._live)  # a daemon restart reopens from here, not from the start
        return self._live

    def _close_session(self, tell_daemon: bool = True) -> None:
        self._forget_given_back()  # its arrays view the session's ring
        live, self._live = self._live, None
        if live is not None:
            close_session(self._stub, live, self._opts.timeout, tell_daemon)

    # -- iteration ------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        refuse_stream_splitters(self.dp_rank, self.dp_size)  # ShardingError: see _wrappers.py
        self._open()
        return self._batches()

    def _batches(self) -> Iterator[Batch]:
        live = self._live
        assert live is not None, "_open() first"
        run = live.run
        live.feed.start()
        while True:
            live = self._live  # a session reopened on a restarted daemon (by save() too) serves the same run
            if live is None or live.run is not run or live.ended:
                return  # closed, another session opened (load_state_dict), or over
            again = self._take_again(live)
            if again is not None:  # given back (_position.py): yielded as it was
                yield make_batch(again.tokens, again.step, self._opts.dtype, torch, metadata=dict(again.arrays),
                                 max_seqlen=again.max_seqlen, buffers=live.buffers,
                                 batch_id=live.batch_id(again.step))
                continue
            try:
                got = None if self._end_met else self._next_announced(live)
            except DaemonUnavailableError:
                if not self._recovery.on() or self._closed or self._live is not live:
                    raise
                self._reconnect(live)
                continue
            if got is None:
                live.ended = True
                if self._opts.end == "pad":
                    yield from self._padding(live)
                return
            arrays = live.delivery.take(got)
            tokens = arrays.pop("tokens")
            passed = got.held.step != self._last_step + 1  # a skipped range: a reopen must not go through it again
            self._last_step = got.held.step
            self._yielded = Yielded(got.held.step, live, tokens, arrays, got.max_seqlen)
            if self._recovery.on() and (passed or self._last_step % recovery_steps(live.reply) == 0):
                self._keep_recovery(live)
            yield make_batch(tokens, got.held.step, self._opts.dtype, torch, metadata=arrays,
                             max_seqlen=got.max_seqlen, buffers=live.buffers, batch_id=live.batch_id(got.held.step))

    def _padding(self, live: Session) -> Iterator[Batch]:
        """end="pad": after the rank's last batch, batches of pad_id flagged
        as padding, one step after another, for as long as the trainer asks
        (until every rank pads: see all_padding). The daemon saves the state
        at these steps too, and a resume from one goes on padding."""
        on_gpu = self._opts.transport in ("cuda", "shm-pinned")
        arrays = padding_arrays(layout_of(live.reply), self._config.pad_id, self._opts.device if on_gpu else None)
        tokens = arrays.pop("tokens")
        while self._live is live:
            self._last_step += 1
            self._yielded = Yielded(self._last_step, live, padding=True)
            yield make_batch(tokens, self._last_step, self._opts.dtype, torch, padding=True, metadata=arrays,
                             max_seqlen=self._config.seq_len, buffers=live.buffers, batch_id=live.batch_id(self._last_step))

    def _time_out(self, published: Optional[int]) -> NoReturn:
        """Closes the loader and raises BatchTimeoutError for the batch awaited."""
        s = self._session
        what = f"session {s.session_id}" if s is not None else "the session"
        seen = "" if published is None else f"; the daemon has announced steps up to {published}"
        self._shut(tell_daemon=False)
        raise BatchTimeoutError(
            f"no batch {self._last_step + 1} within batch_timeout={self._opts.batch_timeout:g} s from the daemon at "
            f"{self.socket} ({what}, job {self.job!r}, dp_rank {self.dp_rank}){seen}. The daemon or its reading "
            "is stuck: see its log and dataloaderd_ready_slots. This loader is closed; resume from the last "
            "checkpoint with a new one")

    # -- what tests and scripts/gpu_check.py look at -----------------------------

    @property
    def _session(self) -> Optional[pb.OpenSessionResponse]:
        """The daemon's reply for the open session, or None."""
        return None if self._live is None else self._live.reply

    @property
    def _ctl(self) -> Optional[Control]:
        return None if self._live is None else self._live.control

    @property
    def _dev_ring(self) -> Optional[_cuda.IpcRing]:
        return None if self._live is None else self._live.dev_ring

    @property
    def _fence(self) -> Optional[_cuda.ReleaseFence[Held]]:
        return None if self._live is None else self._live.fence

    # -- state ----------------------------------------------------------------

    @property
    def ring_path(self) -> Optional[str]:
        """The shared-memory file of the open session (shm transport), else None."""
        s = self._session
        return s.ring.path if s is not None and s.ring.path else None

    @property
    def step(self) -> int:
        """The last step this loader yielded and the trainer kept (not given
        back); before any, the step it resumes after (0 for a fresh run)."""
        if not self._step_known:
            self._open()  # the daemon reads the resume folder and says
        return self._last_step

    @translate
    def set_weights(self, weights: Mapping[str, float], step: Optional[int] = None) -> None:
        """Mixes the datasets by ``weights`` (every dataset of the config by
        name; 0 leaves one out, keeping its cursors) from batch ``step`` on,
        by default the next one. Batches the daemon already made for those
        steps are made again. The change replaces the config's weights or
        schedule, is logged in the state (a resume on any world size keeps
        it; a config changed at resume overrides it) and adds no
        communication: ranks that decide weights together (after an
        all-reduce they already do) call this on every rank with the same
        step. README, "Changing the mixture while the job runs". Like
        save(), it waits through a restart of the daemon (reconnect_timeout),
        and the reopened session gets the change once."""
        self._open()
        first = self._last_step + 1 if step is None else int(step)
        if first <= self._last_step:
            raise StateError(f"set_weights for step {first}, but this loader already yielded step {self._last_step}")
        if self._again is not None and first <= self._again.step:
            raise StateError(f"set_weights for step {first}: batch {self._again.step} was given back and is "
                             f"yielded again as it was made; change the weights from step {self._again.step + 1}")
        ws = check_weights(weights)

        def call() -> None:  # on the session open now: reopened if the daemon went away
            live = self._live
            assert live is not None
            resp = self._stub.SetWeights(pb.SetWeightsRequest(
                session_id=live.reply.session_id, after_step=first - 1, taken_step=self._last_step,
                weights=ws), timeout=self._opts.timeout)
            live.feed.drop_older(resp.generation, first - 1)
        self._after_reconnect(call)
        self._remember_change(first - 1, ws)

    @translate
    def save(self, folder: Union[str, os.PathLike[str]]) -> str:
        """Writes this rank's state after the last batch it yielded into
        ``<folder>/dataloader/rank-<r>-of-<W>.json``; returns the file's path."""
        path = local_folder("save folder", folder)
        self._open()

        def call() -> str:
            s = self._session
            assert s is not None
            return self._stub.SaveState(pb.SaveStateRequest(
                session_id=s.session_id, step=self._last_step, folder=path),
                timeout=self._opts.timeout).path
        return self._after_reconnect(call)

    @translate
    def state_dict(self) -> Dict[str, Any]:
        """This rank's state after the last yielded batch, split by shard (see
        dataloaderd._state) so that torch.distributed.checkpoint saves every
        rank's and reshards it onto any dp_size. Before the first batch, with
        nothing to resume, it is the initial state, as the daemon says, and
        opens no session: DCP asks for it as the template of a load."""
        if self._live is None and self._recovery.lost is None and not self._resume.resumes():
            return _state.from_sharded(self._state_template())
        self._open()

        def call() -> pb.GetStateResponse:
            s = self._session
            assert s is not None
            return self._stub.GetState(pb.GetStateRequest(session_id=s.session_id, step=self._last_step),
                                       timeout=self._opts.timeout)
        return _state.from_sharded(self._after_reconnect(call).sharded)

    @translate
    def _state_template(self) -> pb.ShardedState:
        """This rank's state before its first batch: the daemon's (StateTemplate names the shards it owns)."""
        if self._template is None:
            req = pb.StateTemplateRequest(config=self._config, dp_rank=self.dp_rank, dp_size=self.dp_size)
            try:
                self._template = self._without_session(lambda s: s.StateTemplate(req, timeout=self._opts.timeout)).sharded
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                raise DataloaderdError(
                    f"the daemon at {self.socket} is older than this client: it cannot say which shards a rank owns "
                    "(no StateTemplate), which state_dict() before the first batch and load_state_dict() need; "
                    "run a daemon as new as the client") from None
        return self._template

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Resumes from a state dict: the next batch is the one after its step.
        A version 2 dict (state_dict()) must hold the cursors of the shards
        this rank owns, as DCP's load gives it on any dp_size; a version 1
        dict (older clients) must be this rank's own, on the same dp_size."""
        version = sd.get("version") if isinstance(sd, Mapping) else None
        if version == _state.VERSION:
            sharded = _state.to_sharded(sd, self._state_template, self.dp_rank, self.dp_size)
            step = _state.step_of(sharded.run)
            resume = OpenArgs(resume_sharded=sharded)
        elif version == 1:
            step = _state.check_v1(sd, self.dp_rank, self.dp_size)
            resume = OpenArgs(resume_states=(bytes(sd["state"]),))
        else:
            raise StateError(f"state dict version {version!r}: this client reads versions 1 and {_state.VERSION}")
        self._close_session()
        self._resume = resume
        self._recovery.forget()  # a restarted daemon reopens from the loaded state, not the run left
        self._last_step, self._step_known = step, True

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Closes the session (the daemon frees its ring) and the connection. Idempotent."""
        self._shut(tell_daemon=True)

    def _shut(self, tell_daemon: bool) -> None:
        """close(), with or without the CloseSession call (a stuck daemon would
        not answer it; ending the stream is enough for it to reclaim the session)."""
        if self._closed:
            return
        self._closed = True
        _open_loaders.discard(self)
        try:
            self._close_session(tell_daemon)
        finally:
            self._channel.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Best effort. While the interpreter shuts down gRPC's threads are
        # frozen and a close would hang; the daemon then reclaims the session
        # when the process's stream breaks.
        if sys.is_finalizing():
            return
        try:
            self.close()
        except Exception:
            pass
