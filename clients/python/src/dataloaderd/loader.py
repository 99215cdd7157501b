"""The Loader: one data-parallel rank's view of a dataloaderd session."""

from __future__ import annotations

import atexit
import os
import sys
import time
import weakref
from typing import Any, Dict, Iterator, List, Mapping, NoReturn, Optional, Union, cast

import grpc
import numpy as np

from . import _control, _cuda, _state
from ._delivery import DELIVERIES, CudaDelivery, PinnedDelivery
from ._feed import ControlFeed, Feed, Held, open_feed
from ._job import default_job
from ._proto import dataloader_pb2 as pb
from ._reconnect import Reconnecting, Session, connect, recovery_steps
from ._torchapi import Torch
from .batch import DTYPES, Batch, make_batch, padding_arrays
from .config import env_int, load_config, local_folder, to_proto
from .errors import BatchTimeoutError, ConfigError, DaemonUnavailableError, DataloaderdError, StateError, translate


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


class Loader(Reconnecting):
    """Batches of packed token lines for one data-parallel rank.

    ``config`` is a dict or the path of a YAML/JSON file (keys in the README).
    ``dp_rank``/``dp_size`` default to torchrun's RANK/WORLD_SIZE, ``socket``
    to DATALOADERD_SOCKET. Processes of one tensor/pipeline-parallel group pass
    the same ``dp_rank`` and ``consumers=<group size>`` and read the same batches.

    Iterating yields :class:`Batch` dicts: ``tokens`` (the int32 lines
    [lines, seq_len+1] as the daemon wrote them; on ``shm`` a read-only view
    of shared memory, valid until the next batch is asked for),
    ``input_ids`` (``tokens[:, :-1]``), ``labels`` (``input_ids`` again, as
    Hugging Face models take it: they shift it), ``shift_labels``
    (``tokens[:, 1:]``, the next tokens already shifted), ``step`` and
    ``lines``. The three are ``dtype`` (int64 by default, writable torch
    tensors, numpy arrays without torch; ``"int32"``: zero-copy views). Pass
    ``copy=True`` for a ``tokens`` you may keep and write.

    ``next()`` raises BatchTimeoutError when no batch comes within
    ``batch_timeout`` seconds (default 600; None waits forever), so a stuck
    daemon fails the step instead of hanging it.
    """

    def __init__(self, config: Union[str, os.PathLike[str], Mapping[str, object]],
                 dp_rank: Optional[int] = None, dp_size: Optional[int] = None,
                 socket: Optional[str] = None, resume_from: Optional[Union[str, os.PathLike[str]]] = None,
                 transport: str = "shm", *, job: Optional[str] = None, consumers: int = 1,
                 slots: int = 0, copy: bool = False, timeout: float = 60.0, fast: bool = True,
                 device: Optional[int] = None, batch_timeout: Optional[float] = 600.0, dtype: object = "int64",
                 end: str = "stop", reconnect_timeout: float = 60.0):
        data, base = load_config(config)
        self._config = to_proto(data, base)
        self.dp_rank = env_int("RANK", 0) if dp_rank is None else int(dp_rank)
        self.dp_size = env_int("WORLD_SIZE", 1) if dp_size is None else int(dp_size)
        if self.dp_size < 1 or not 0 <= self.dp_rank < self.dp_size:
            raise ConfigError(f"dp_rank {self.dp_rank} is out of range for dp_size {self.dp_size}")
        if transport not in DELIVERIES:
            raise ConfigError(f"transport {transport!r}: want one of {', '.join(DELIVERIES)}")
        if consumers < 1 or slots < 0:
            raise ConfigError(f"consumers must be >= 1 and slots >= 0, got {consumers} and {slots}")
        if batch_timeout is not None and not batch_timeout > 0:
            raise ConfigError(f"batch_timeout must be > 0 seconds or None, got {batch_timeout!r}")
        if not reconnect_timeout >= 0:
            raise ConfigError(f"reconnect_timeout must be >= 0 seconds (0: off), got {reconnect_timeout!r}")
        self._init_reconnect(reconnect_timeout)  # see _reconnect.py
        if end not in ("stop", "pad"):
            raise ConfigError(f"end {end!r}: want 'stop' (iteration ends after the rank's last batch) or 'pad'")
        self._end = end
        self._dtype = str(dtype).replace("torch.", "")  # "int64", np.int64 and torch.int64 alike
        if self._dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r}: want one of {', '.join(DTYPES)} (or the torch or numpy type)")
        self._batch_timeout = batch_timeout
        self.job = job or default_job()  # see _job.py
        self.transport = transport
        self._consumers, self._slots, self._copy, self._timeout = consumers, slots, copy, timeout
        self._fast = fast
        self.device = env_int("LOCAL_RANK", 0) if device is None else int(device)
        if self.device < 0:
            raise ConfigError(f"device must be >= 0, got {self.device}")
        self._resume_from = local_folder("resume_from", resume_from)
        self._resume_states: List[bytes] = []

        path = socket or os.environ.get("DATALOADERD_SOCKET")
        if not path:
            raise DaemonUnavailableError("no daemon socket: pass socket= or set DATALOADERD_SOCKET")
        path = path[len("unix://"):] if path.startswith("unix://") else path
        if not os.path.exists(path):
            raise DaemonUnavailableError(f"no daemon socket at {path}: is 'dataloaderd serve --socket {path}' running?")
        self.socket = path
        self._channel, self._stub = connect(path)
        _open_loaders.add(self)
        self._resume_sharded: Optional[pb.ShardedState] = None
        self._reopened_after, self._skip_to, self._reconnect_step = 0.0, 0, 0
        self._live: Optional[Session] = None
        self._last_step = 0
        # Whether _last_step is the resumed step before a session said so:
        # the step of a resume folder is the daemon's to read (OpenSession's
        # start_step); the client opens no rank file.
        self._step_known = not self._resume_from
        self._ended = False
        self._closed = False

    # -- session --------------------------------------------------------------

    @translate
    def _open(self) -> pb.OpenSessionResponse:
        if self._closed:
            raise DataloaderdError("the loader is closed")
        if self._live is None:
            # Zero-copy torch views of shm are copy-on-write: torch has no
            # read-only tensors, and a write into the ring's read-only
            # mapping would kill the process.
            writable = self._dtype == "int32" and torch is not None
            delivery = DELIVERIES[self.transport](self._copy, self.device, writable)  # before the daemon makes a ring
            s = self._stub.OpenSession(pb.OpenSessionRequest(
                job=self.job, config=self._config, dp_rank=self.dp_rank, dp_size=self.dp_size,
                consumers=self._consumers, transport=delivery.wire,
                resume_from=self._resume_from, resume_states=self._resume_states,
                resume_sharded=self._resume_sharded, slots=self._slots, device=self.device,
                reconnected_after_ns=int(self._reopened_after * 1e9), skip_to_step=self._skip_to,
                reconnect_step=self._reconnect_step,
            ), timeout=self._timeout)
            self._reopened_after, self._skip_to, self._reconnect_step = 0.0, 0, 0
            feed: Optional[Feed] = None
            try:
                feed = open_feed(self._stub, s, self._fast, self._batch_timeout)
                delivery.open(s, feed.release)
            except Exception:  # torch's own errors too: nothing of the session may stay
                delivery.close()
                if feed is not None:
                    feed.close()
                self._stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id, consumer=s.consumer),
                                        timeout=self._timeout)
                raise
            self._live = Session(s, feed, delivery)
            self._last_step, self._step_known = s.start_step, True
            self._ended = False
        return self._live.reply

    def _close_session(self, tell_daemon: bool = True) -> None:
        live, self._live = self._live, None
        if live is None:
            return
        live.delivery.close()  # on the GPU, waits for the kernels still reading device slots
        try:
            if tell_daemon:
                self._stub.CloseSession(pb.CloseSessionRequest(session_id=live.reply.session_id,
                                                               consumer=live.reply.consumer),
                                        timeout=self._timeout)
        except grpc.RpcError:
            pass  # the daemon reclaims a session whose stream ends anyway
        live.feed.close()

    # -- iteration ------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        self._open()
        return self._batches()

    def _batches(self) -> Iterator[Batch]:
        live = self._live
        assert live is not None, "_open() first"
        live.feed.start()
        while not self._ended:
            while live.reopened_as is not None:  # by save() or state_dict(), on a restarted daemon
                live = live.reopened_as
            if self._live is not live:
                return  # closed, or another session opened (load_state_dict)
            try:
                got = self._next_announced(live)
            except DaemonUnavailableError:
                if not self._reconnects() or self._closed or self._live is not live:
                    raise
                live = self._reconnect(live)
                continue
            if got is None:
                self._ended = True
                if self._end == "pad":
                    yield from self._padding(live)
                return
            arrays = live.delivery.take(got)
            tokens = arrays.pop("tokens")
            self._last_step = got.held.step
            if self._reconnects() and self._last_step % recovery_steps(live.reply) == 0:
                self._keep_recovery(live)
            yield make_batch(tokens, got.held.step, self._dtype, torch, metadata=arrays, max_seqlen=got.max_seqlen)

    def _padding(self, live: Session) -> Iterator[Batch]:
        """end="pad": after the rank's last batch, batches of pad_id flagged
        as padding, one step after another, for as long as the trainer asks
        (until every rank pads: see all_padding). The daemon saves the state
        at these steps too, and a resume from one goes on padding."""
        c = self._config
        host = padding_arrays(c.batch_size, c.seq_len, c.pad_id, c.metadata)
        for a in host.values():
            a.flags.writeable = False
        arrays: Dict[str, Any] = dict(host)
        if self.transport in ("cuda", "shm-pinned"):
            t = _cuda._torch()
            arrays = {k: t.as_tensor(a, device=t.device("cuda", self.device)) for k, a in host.items()}
        tokens = arrays.pop("tokens")
        while self._live is live:
            self._last_step += 1
            yield make_batch(tokens, self._last_step, self._dtype, torch, padding=True, metadata=arrays,
                             max_seqlen=c.seq_len)

    def _time_out(self, published: Optional[int]) -> NoReturn:
        """Closes the loader and raises BatchTimeoutError for the batch awaited."""
        s = self._session
        what = f"session {s.session_id}" if s is not None else "the session"
        seen = "" if published is None else f"; the daemon has announced steps up to {published}"
        self._shut(tell_daemon=False)
        raise BatchTimeoutError(
            f"no batch {self._last_step + 1} within batch_timeout={self._batch_timeout:g} s from the daemon at "
            f"{self.socket} ({what}, job {self.job!r}, dp_rank {self.dp_rank}){seen}. The daemon or its reading "
            "is stuck: see its log and dataloaderd_ready_slots. This loader is closed; resume from the last "
            "checkpoint with a new one")

    # -- what tests and scripts/gpu_check.py look at -----------------------------

    @property
    def _session(self) -> Optional[pb.OpenSessionResponse]:
        """The daemon's reply for the open session, or None."""
        return None if self._live is None else self._live.reply

    @property
    def _ctl(self) -> Optional[_control.Control]:
        """The control block batches are announced in, or None (messages)."""
        feed = None if self._live is None else self._live.feed
        return feed.control if isinstance(feed, ControlFeed) else None

    @property
    def _dev_ring(self) -> Optional[_cuda.IpcRing]:
        """The device ring of an open cuda session, else None."""
        delivery = None if self._live is None else self._live.delivery
        return delivery.ring if isinstance(delivery, CudaDelivery) else None

    @property
    def _fence(self) -> Optional[_cuda.ReleaseFence[Held]]:
        """The release fence of an open cuda or shm-pinned session, else None."""
        delivery = None if self._live is None else self._live.delivery
        return delivery.fence if isinstance(delivery, (CudaDelivery, PinnedDelivery)) else None

    # -- state ----------------------------------------------------------------

    @property
    def ring_path(self) -> Optional[str]:
        """The shared-memory file of the open session (shm transport), else None."""
        s = self._session
        return s.ring.path if s is not None and s.ring.path else None

    @property
    def step(self) -> int:
        """The last step this loader yielded; before any, the step it resumes
        after (0 for a fresh run)."""
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
        bad = [f"{k!r}: {v!r}" for k, v in weights.items()
               if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float))]
        if bad:
            raise ConfigError(f"set_weights: weights must map dataset names to numbers, got {', '.join(bad)}")
        ws = {k: float(v) for k, v in weights.items()}

        def call() -> None:  # on the session open now: reopened if the daemon went away
            live = self._live
            assert live is not None
            resp = self._stub.SetWeights(pb.SetWeightsRequest(
                session_id=live.reply.session_id, after_step=first - 1, taken_step=self._last_step,
                weights=ws), timeout=self._timeout)
            live.feed.drop_older(resp.generation, first - 1)
        self._after_reconnect(call)
        self._remember_change(first - 1, dict(weights))

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
                timeout=self._timeout).path
        return self._after_reconnect(call)

    @translate
    def state_dict(self) -> Dict[str, Any]:
        """This rank's state after the last yielded batch, split by shard (see
        dataloaderd._state) so that torch.distributed.checkpoint saves every
        rank's and reshards it onto any dp_size. Before the first batch, with
        nothing to resume, it is the initial state and opens no session: DCP
        asks for it as the template of a load."""
        if self._live is None and not (self._resume_from or self._resume_states or self._resume_sharded):
            return _state.template(self._config, self.dp_rank, self.dp_size)
        self._open()

        def call() -> pb.GetStateResponse:
            s = self._session
            assert s is not None
            return self._stub.GetState(pb.GetStateRequest(session_id=s.session_id, step=self._last_step),
                                       timeout=self._timeout)
        return _state.from_sharded(self._after_reconnect(call).sharded)

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Resumes from a state dict: the next batch is the one after its step.
        A version 2 dict (state_dict()) must hold the cursors of the shards
        this rank owns, as DCP's load gives it on any dp_size; a version 1
        dict (older clients) must be this rank's own, on the same dp_size."""
        version = sd.get("version") if isinstance(sd, Mapping) else None
        if version == _state.VERSION:
            sharded = _state.to_sharded(sd, self._config, self.dp_rank, self.dp_size)
            step = _state.step_of(sharded.run)
            self._close_session()
            self._resume_sharded, self._resume_states, self._resume_from = sharded, [], ""
        elif version == 1:
            step = self._check_v1(sd)
            self._close_session()
            self._resume_sharded, self._resume_states, self._resume_from = None, [bytes(sd["state"])], ""
        else:
            raise StateError(f"state dict version {version!r}: this client reads versions 1 and {_state.VERSION}")
        self._last_step, self._step_known = step, True

    def _check_v1(self, sd: Mapping[str, Any]) -> int:
        """Checks a version 1 state dict (one rank's state file) and returns its step."""
        try:
            rank, size, step = sd["dp_rank"], sd["dp_size"], int(sd["step"])
            bytes(sd["state"])
        except (KeyError, TypeError, ValueError) as e:
            raise StateError(f"not a dataloaderd state dict: missing or bad {e}") from e
        if size != self.dp_size:
            raise StateError(
                f"state dict is from dp_size {size}, this loader has dp_size {self.dp_size}: a version 1 state dict "
                "holds one rank's shards; to resume onto another dp_size pass resume_from=<checkpoint folder>")
        if rank != self.dp_rank:
            raise StateError(
                f"state dict is dp_rank {rank}'s, this loader is dp_rank {self.dp_rank}: load each "
                "rank's own state dict, or pass resume_from=<checkpoint folder>")
        return step

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
