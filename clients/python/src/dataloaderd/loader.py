"""The Loader: one data-parallel rank's view of a dataloaderd session."""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Dict, Iterator, Mapping, Optional, Union

import grpc
import numpy as np

from ._proto import dataloader_pb2 as pb
from ._proto import dataloader_pb2_grpc as pb_grpc
from . import _control, _cuda
from ._ring import ShmRing
from .config import env_int, load_config, optional_abspath, to_proto
from .errors import (BatchTimeoutError, ConfigError, DaemonUnavailableError, DataloaderdError,
                     StateError, from_rpc_error, translate)

try:  # torch is optional: without it batches are numpy arrays
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

__all__ = ["Loader"]

# shm-pinned is shm to the daemon; the client copies each batch to the GPU.
_TRANSPORTS = {"shm": pb.TRANSPORT_SHM, "inline": pb.TRANSPORT_INLINE, "cuda": pb.TRANSPORT_CUDA,
               "shm-pinned": pb.TRANSPORT_SHM}
STATE_DICT_VERSION = 1

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


class Loader:
    """Batches of packed token lines for one data-parallel rank.

    ``config`` is a dict or the path of a YAML/JSON file (keys in the README).
    ``dp_rank``/``dp_size`` default to torchrun's RANK/WORLD_SIZE, ``socket``
    to DATALOADERD_SOCKET. Processes of one tensor/pipeline-parallel group pass
    the same ``dp_rank`` and ``consumers=<group size>`` and read the same batches.

    Iterating yields dicts: ``tokens`` (int32 numpy array [lines, seq_len+1]),
    ``input_ids`` and ``labels`` (``tokens[:, :-1]`` and ``tokens[:, 1:]``, torch
    tensors when torch is installed), ``step`` and ``lines``. On the ``shm``
    transport these are views of shared memory, valid until the next batch is
    asked for; pass ``copy=True`` to get batches you may keep.

    ``next()`` raises BatchTimeoutError when no batch comes within
    ``batch_timeout`` seconds (default 600; None waits forever), so a stuck
    daemon fails the step instead of hanging it.
    """

    def __init__(self, config: Union[str, os.PathLike, Mapping[str, Any]],
                 dp_rank: Optional[int] = None, dp_size: Optional[int] = None,
                 socket: Optional[str] = None, resume_from: Optional[Union[str, os.PathLike]] = None,
                 transport: str = "shm", *, job: Optional[str] = None, consumers: int = 1,
                 slots: int = 0, copy: bool = False, timeout: float = 60.0, fast: bool = True,
                 device: Optional[int] = None, batch_timeout: Optional[float] = 600.0):
        data, base = load_config(config)
        self._config = to_proto(data, base)
        self.dp_rank = env_int("RANK", 0) if dp_rank is None else int(dp_rank)
        self.dp_size = env_int("WORLD_SIZE", 1) if dp_size is None else int(dp_size)
        if self.dp_size < 1 or not 0 <= self.dp_rank < self.dp_size:
            raise ConfigError(f"dp_rank {self.dp_rank} is out of range for dp_size {self.dp_size}")
        if transport not in _TRANSPORTS:
            raise ConfigError(f"transport {transport!r}: want one of {', '.join(_TRANSPORTS)}")
        if consumers < 1 or slots < 0:
            raise ConfigError(f"consumers must be >= 1 and slots >= 0, got {consumers} and {slots}")
        if batch_timeout is not None and not batch_timeout > 0:
            raise ConfigError(f"batch_timeout must be > 0 seconds or None, got {batch_timeout!r}")
        self._batch_timeout = batch_timeout
        self.job = job or os.environ.get("DATALOADERD_JOB") or os.environ.get("TORCHELASTIC_RUN_ID") or "default"
        self.transport = transport
        self._consumers, self._slots, self._copy, self._timeout = consumers, slots, copy, timeout
        self._fast = fast
        self.device = env_int("LOCAL_RANK", 0) if device is None else int(device)
        if self.device < 0:
            raise ConfigError(f"device must be >= 0, got {self.device}")
        self._resume_from = optional_abspath(resume_from)
        self._resume_states: list = []

        path = socket or os.environ.get("DATALOADERD_SOCKET")
        if not path:
            raise DaemonUnavailableError("no daemon socket: pass socket= or set DATALOADERD_SOCKET")
        path = path[len("unix://"):] if path.startswith("unix://") else path
        if not os.path.exists(path):
            raise DaemonUnavailableError(f"no daemon socket at {path}: is 'dataloaderd serve --socket {path}' running?")
        self.socket = path
        self._channel = grpc.insecure_channel("unix://" + path, options=[
            ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
        self._stub = pb_grpc.LoaderStub(self._channel)
        _open_loaders.add(self)
        self._session: Optional[pb.OpenSessionResponse] = None
        self._ring: Optional[ShmRing] = None
        self._ctl: Optional[_control.Control] = None
        self._dev_ring = None  # cuda: _cuda.IpcRing
        self._fence = None  # cuda, shm-pinned: _cuda.ReleaseFence
        self._pinned = None  # shm-pinned: _cuda.PinnedShm
        self._requests: Optional[queue.Queue] = None
        self._responses = None
        self._held: Optional[tuple] = None
        self._waiting_since: Optional[float] = None  # monotonic, while next() waits on a message
        self._timed_out = False
        self._last_step = 0
        self._ended = False
        self._closed = False

    # -- session --------------------------------------------------------------

    @translate
    def _open(self) -> pb.OpenSessionResponse:
        if self._closed:
            raise DataloaderdError("the loader is closed")
        if self._session is None:
            if self.transport in ("cuda", "shm-pinned"):
                _cuda.require_torch_cuda(self.device)  # before the daemon makes a ring
            s = self._stub.OpenSession(pb.OpenSessionRequest(
                job=self.job, config=self._config, dp_rank=self.dp_rank, dp_size=self.dp_size,
                consumers=self._consumers, transport=_TRANSPORTS[self.transport],
                resume_from=self._resume_from, resume_states=self._resume_states, slots=self._slots,
                device=self.device,
            ), timeout=self._timeout)
            self._ctl = None
            if s.transport == pb.TRANSPORT_CUDA:
                try:
                    self._dev_ring = _cuda.IpcRing(s.ring.ipc_handle, s.ring.slots, s.ring.slot_stride,
                                                   s.line_tokens, s.ring.device)
                    self._fence = _cuda.ReleaseFence(s.ring.device, max_held=_fence_hold(s.ring.slots))
                except Exception:  # torch's own errors too: nothing of the session may stay
                    self._fence = None
                    if self._dev_ring is not None:
                        self._dev_ring.close()
                        self._dev_ring = None
                    self._stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id, consumer=s.consumer),
                                            timeout=self._timeout)
                    raise
                self._ctl = self._map_control(s)
            if s.transport == pb.TRANSPORT_SHM:
                try:
                    self._ring = ShmRing(s.ring.path, s.ring.slots, s.ring.slot_stride, s.line_tokens,
                                         s.ring.data_offset)
                    self._ctl = self._map_control(s)
                    if self.transport == "shm-pinned":
                        self._pinned = _cuda.PinnedShm(self._ring, self.device)
                        self._fence = _cuda.ReleaseFence(self.device, max_held=_fence_hold(s.ring.slots))
                except Exception as e:  # torch's own errors too: nothing of the session may stay
                    self._fence = None
                    for part in (self._pinned, self._ring, self._ctl):
                        if part is not None:
                            part.close()
                    self._pinned = self._ring = self._ctl = None
                    self._stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id, consumer=s.consumer),
                                            timeout=self._timeout)
                    if not isinstance(e, (OSError, ValueError)):
                        raise
                    raise DataloaderdError(
                        f"cannot map the ring {s.ring.path} ({e}): is the daemon on another machine or in "
                        "another container? transport='inline' works without shared memory") from e
            self._session = s
            self._last_step = s.start_step
            self._ended = False
        return self._session

    def _map_control(self, s: pb.OpenSessionResponse) -> Optional[_control.Control]:
        """The session's control block, or None when batches come by messages
        (fast=False, another platform, an older daemon, or a block this
        process may not map)."""
        path, size = s.ring.control_path, s.ring.control_bytes
        if not path and s.transport == pb.TRANSPORT_SHM:
            path, size = s.ring.path, s.ring.data_offset  # a daemon from before control_path
        if not (self._fast and path and size > 0 and _control.supported()):
            return None
        try:
            return _control.Control(path, size, s.consumer)
        except (OSError, ValueError):
            return None  # e.g. another user's ring

    def _close_session(self, tell_daemon: bool = True) -> None:
        s, self._session = self._session, None
        if s is None:
            return
        if self._fence is not None:
            if self._held is not None:
                self._fence.give_up(self._held)  # the batch in hand too
            self._fence.drain()  # kernels may still read device slots
            self._fence = None
        if self._dev_ring is not None:
            self._dev_ring.close()
            self._dev_ring = None
        if self._pinned is not None:
            self._pinned.close()  # waits for its copies; before the ring is unmapped
            self._pinned = None
        try:
            if tell_daemon:
                self._stub.CloseSession(pb.CloseSessionRequest(session_id=s.session_id, consumer=s.consumer),
                                        timeout=self._timeout)
        except grpc.RpcError:
            pass  # the daemon reclaims a session whose stream ends anyway
        if self._requests is not None:
            self._requests.put(None)
        if self._responses is not None:
            self._responses.cancel()
        self._requests = self._responses = self._held = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None

    # -- iteration ------------------------------------------------------------

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        self._open()
        return self._batches()

    def _release(self, slot: int, step: int, wait_ns: int) -> None:
        self._requests.put(pb.BatchesRequest(release=pb.Release(slot=slot, step=step, wait_ns=wait_ns)))

    def _batches(self) -> Iterator[Dict[str, Any]]:
        s = self._session
        if self._responses is None:
            self._requests = queue.Queue()
            self._requests.put(pb.BatchesRequest(attach=pb.Attach(
                session_id=s.session_id, consumer=s.consumer, shm_control=self._ctl is not None)))
            self._responses = self._stub.Batches(_requests_from(self._requests))
            self._timed_out = False
            if self._ctl is None and self._batch_timeout is not None:
                threading.Thread(target=_watch_batches, args=(weakref.ref(self), self._responses),
                                 name="dataloaderd-batch-timeout", daemon=True).start()
        if self._ctl is not None:
            yield from self._control_batches(s)
            return
        while not self._ended and self._session is s:
            if self._held is not None:
                if self._fence is not None:
                    # A device slot goes back once the GPU work queued on it is done.
                    for held in self._fence.give_up(self._held):
                        self._release(*held)
                else:
                    self._release(*self._held)
                self._held = None
            if self._fence is not None:
                # Slots whose GPU work (or copy) finished go back before we block.
                for held in self._fence.completed():
                    self._release(*held)
            start = time.perf_counter_ns()
            self._waiting_since = time.monotonic()
            try:
                msg = next(self._responses)
            except grpc.RpcError as err:
                if self._timed_out:
                    self._time_out(None)
                raise from_rpc_error(err) from err
            except StopIteration:
                raise DaemonUnavailableError("the daemon ended the batch stream") from None
            finally:
                self._waiting_since = None
            wait_ns = time.perf_counter_ns() - start
            if msg.end:
                self._ended = True
                return
            if self._pinned is not None:
                # The shm slot goes back once the copy out of it is done.
                tokens, copied = self._pinned.fetch(msg.slot, msg.lines)
                for held in self._fence.give_up((msg.slot, msg.step, wait_ns), copied):
                    self._release(*held)
            elif s.transport == pb.TRANSPORT_CUDA:
                tokens = self._dev_ring.batch(msg.slot, msg.lines)
                if self._copy:
                    tokens = tokens.clone()  # queued on the current stream: the fence waits for it
                    for held in self._fence.give_up((msg.slot, msg.step, wait_ns)):
                        self._release(*held)
                else:
                    self._held = (msg.slot, msg.step, wait_ns)
            elif s.transport != pb.TRANSPORT_SHM:
                tokens = np.frombuffer(msg.data, dtype="<i4").reshape(msg.lines, s.line_tokens)
                self._release(msg.slot, msg.step, wait_ns)
            elif self._copy:
                tokens = self._ring.batch(msg.slot, msg.lines).copy()
                self._release(msg.slot, msg.step, wait_ns)
            else:
                tokens = self._ring.batch(msg.slot, msg.lines)
                self._held = (msg.slot, msg.step, wait_ns)
            self._last_step = msg.step
            yield _batch(tokens, msg.step)

    def _control_batches(self, s: pb.OpenSessionResponse) -> Iterator[Dict[str, Any]]:
        """Batches announced in the ring's control block: no message per batch.
        On cuda a step is released there only once the GPU work queued on its
        slot has finished (ReleaseFence); releases stay in step order."""
        ctl, ring, fence = self._ctl, self._ring, self._fence

        def give_back(held: tuple, event: Any = None) -> None:
            if fence is None:
                ctl.release(held[1], held[2])
            else:
                for _, step, wait_ns in fence.give_up(held, event):
                    ctl.release(step, wait_ns)

        while not self._ended and self._session is s:
            want = self._last_step + 1
            if self._held is not None:
                give_back(self._held)
                self._held = None
            start = time.perf_counter_ns()
            deadline = None if self._batch_timeout is None else time.monotonic() + self._batch_timeout
            while True:
                state, got = ctl.poll(want)
                if got is not None:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    self._time_out(ctl.published())
                if state == _control.ENDED:
                    self._ended = True
                    return
                if state != _control.RUNNING:
                    self._stream_failure()
                if fence is not None:
                    # Slots whose GPU work has finished go back while we wait.
                    for _, step, wait_ns in fence.completed():
                        ctl.release(step, wait_ns)
                ctl.wait(want, 0.05)
                if self._responses.done():
                    self._stream_failure()
            wait_ns = time.perf_counter_ns() - start
            slot, lines = got
            if self._pinned is not None:
                tokens, copied = self._pinned.fetch(slot, lines)
                give_back((slot, want, wait_ns), copied)  # once the copy out of the slot is done
            elif fence is not None:
                tokens = self._dev_ring.batch(slot, lines)
                if self._copy:
                    tokens = tokens.clone()  # queued on the current stream: the fence waits for it
                    give_back((slot, want, wait_ns))
                else:
                    self._held = (slot, want, wait_ns)
            elif self._copy:
                tokens = ring.batch(slot, lines).copy()
                ctl.release(want, wait_ns)
            else:
                tokens = ring.batch(slot, lines)
                self._held = (slot, want, wait_ns)
            self._last_step = want
            yield _batch(tokens, want)

    def _time_out(self, published: Optional[int]) -> None:
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

    @translate
    def _stream_failure(self) -> None:
        """Raises what ended the batch stream: the daemon's status."""
        try:
            for msg in self._responses:
                if msg.end:
                    break
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err
        raise DaemonUnavailableError("the daemon closed the session")

    # -- state ----------------------------------------------------------------

    @property
    def ring_path(self) -> Optional[str]:
        """The shared-memory file of the open session (shm transport), else None."""
        s = self._session
        return s.ring.path if s is not None and s.ring.path else None

    @property
    def step(self) -> int:
        """The last step this loader yielded (the resumed step before any)."""
        return self._last_step

    @translate
    def save(self, folder: Union[str, os.PathLike]) -> str:
        """Writes this rank's state after the last batch it yielded into
        ``<folder>/dataloader/rank-<r>-of-<W>.json``; returns the file's path."""
        s = self._open()
        resp = self._stub.SaveState(pb.SaveStateRequest(
            session_id=s.session_id, step=self._last_step, folder=optional_abspath(folder)), timeout=self._timeout)
        return resp.path

    @translate
    def state_dict(self) -> Dict[str, Any]:
        """This rank's state after the last yielded batch, for torch.distributed.checkpoint."""
        s = self._open()
        resp = self._stub.GetState(pb.GetStateRequest(session_id=s.session_id, step=self._last_step),
                                   timeout=self._timeout)
        return {"version": STATE_DICT_VERSION, "dp_rank": resp.dp_rank, "dp_size": resp.dp_size,
                "step": self._last_step, "state": resp.state}

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restores a state from state_dict(); the next iteration continues after
        its step. Resuming onto another dp_size needs resume_from=<checkpoint folder>."""
        try:
            version, rank, size, blob = sd["version"], sd["dp_rank"], sd["dp_size"], sd["state"]
        except (KeyError, TypeError) as e:
            raise StateError(f"not a dataloaderd state dict: missing {e}") from e
        if version != STATE_DICT_VERSION:
            raise StateError(f"state dict version {version}, this client reads {STATE_DICT_VERSION}")
        if size != self.dp_size:
            raise StateError(
                f"state dict is from dp_size {size}, this loader has dp_size {self.dp_size}: a state dict "
                "holds one rank's shards; to resume onto another dp_size pass resume_from=<checkpoint folder>")
        if rank != self.dp_rank:
            raise StateError(
                f"state dict is dp_rank {rank}'s, this loader is dp_rank {self.dp_rank}: load each "
                "rank's own state dict, or pass resume_from=<checkpoint folder>")
        self._close_session()
        self._resume_states = [bytes(blob)]
        self._resume_from = ""

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

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
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


def _watch_batches(ref: "weakref.ref[Loader]", responses: Any) -> None:
    """Cancels a message-mode batch stream whose next() has waited longer than
    the loader's batch_timeout; the loader then raises BatchTimeoutError. Ends
    with the stream, or when the loader is gone."""
    while True:
        loader = ref()
        if loader is None or loader._closed or loader._responses is not responses or responses.done():
            return
        timeout, since = loader._batch_timeout, loader._waiting_since
        if since is not None and time.monotonic() - since > timeout:
            if loader._waiting_since is since:  # else the batch came meanwhile
                loader._timed_out = True  # before the cancel that the waiting next() sees
                responses.cancel()
                return
        del loader
        time.sleep(min(1.0, timeout / 4))


def _fence_hold(slots: int) -> int:
    """How many given-up device slots a ReleaseFence may hold: at most 2, and
    fewer than the ring has, since the daemon needs a free slot to produce the
    batch the loader waits for."""
    return max(1, min(2, slots - 1))


def _requests_from(q: "queue.Queue[Optional[pb.BatchesRequest]]") -> Iterator[pb.BatchesRequest]:
    """The request side of a Batches stream: what the loader queues, until None."""
    while True:
        msg = q.get()
        if msg is None:
            return
        yield msg


def _batch(tokens: Any, step: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {"tokens": tokens, "step": step, "lines": tokens.shape[0]}
    if not isinstance(tokens, np.ndarray):  # a device tensor (cuda)
        out["input_ids"], out["labels"] = tokens[:, :-1], tokens[:, 1:]
    elif torch is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only shared memory
            t = torch.from_numpy(tokens)
        out["input_ids"], out["labels"] = t[:, :-1], t[:, 1:]
    else:
        out["input_ids"], out["labels"] = tokens[:, :-1], tokens[:, 1:]
    return out
