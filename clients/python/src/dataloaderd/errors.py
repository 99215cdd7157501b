"""The exceptions of the dataloaderd client. Every gRPC error is turned into one
of these (``raise ... from``), so callers never catch gRPC internals."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Type, TypeVar, cast

import grpc

__all__ = [
    "DataloaderdError",
    "ConfigError",
    "SessionNotFoundError",
    "SessionExistsError",
    "StateError",
    "PathNotAllowedError",
    "DaemonUnavailableError",
    "ObjectStorageError",
    "TransportUnavailableError",
    "ResourceExhaustedError",
    "BatchTimeoutError",
    "CudaUnavailableError",
    "CudaError",
    "FileChangedError",
    "ShardingError",
    "AttentionLeakError",
]


class DataloaderdError(Exception):
    """Base class of every error the client raises.

    ``code`` is the name of the gRPC status code when the error came from the
    daemon (e.g. ``"INVALID_ARGUMENT"``), else None; the message is the
    daemon's own text."""

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        self.code = code


class ConfigError(DataloaderdError, ValueError):
    """The job config, a request argument, or a dataset is invalid (for an
    ``s3://`` dataset also: the store describes an object past the daemon's
    bounds, lists without end, or gives an object no version)."""


class SessionNotFoundError(DataloaderdError):
    """The session is closed, was reclaimed, or never existed."""


class SessionExistsError(DataloaderdError):
    """The (job, dp_rank) session is already open, or all its consumers joined."""


class StateError(DataloaderdError):
    """A saved state does not match the corpus or config, or a step is not available."""


class PathNotAllowedError(DataloaderdError, PermissionError):
    """A path the daemon may not use for this process (PERMISSION_DENIED):
    it lies outside every --allow-root of the daemon; or this process's
    user may not reach it with its own rights (a save folder it cannot
    write, a rank file it cannot read: the daemon checks them for the
    caller, docs/security.md); or the daemon itself cannot write it (a
    read-only folder or file system); or the object store refused the
    daemon's credentials for an ``s3://`` object (403). The message names
    the path, and the user or the rights at fault."""


class DaemonUnavailableError(DataloaderdError, ConnectionError):
    """The daemon is not running, not reachable, or shutting down."""


class ObjectStorageError(DataloaderdError, ConnectionError):
    """The object store of an ``s3://`` dataset could not serve it
    (UNAVAILABLE): it could not be reached, or kept failing or answering
    wrongly, for longer than the daemon's ``--object-retry-for``; or it
    refused the request for good (a wrong region or endpoint); or object
    storage is not enabled on this daemon. The daemon itself is up, so the
    loader does not reconnect. The message names the object, the request
    and the store's answer."""


class TransportUnavailableError(DataloaderdError):
    """The transport asked for cannot be used here (e.g. ``cuda`` on a daemon
    without a CUDA driver, or a client without torch and a GPU); ``shm`` and
    ``inline`` work everywhere."""


class ResourceExhaustedError(DataloaderdError):
    """The daemon is out of a resource the session needs: GPU memory for a
    device ring, one of its budgets (the message names it and the flag that
    sets it, e.g. ``--ring-budget-mb``), or space on the filesystem a save
    writes to ("no space left on device", "disk quota exceeded")."""


class FileChangedError(DataloaderdError):
    """A file the session reads changed under the daemon: a corpus file
    truncated or rewritten in place (``cp`` over it) while mapped, or the
    session's own ring file cut short, or an ``s3://`` object replaced or
    deleted after the session opened it. Only that session fails; the message
    names the file. Replace files in use by writing a new file and renaming
    it over the old one."""


class ShardingError(DataloaderdError):
    """The Loader is iterated through a wrapper that splits one stream among
    the processes (accelerate's DataLoaderDispatcher or IterableDatasetShard,
    which Hugging Face Trainer puts around a train_dataset): each rank's
    Loader reads a stream of its own, so the wrapper would drop the other
    ranks' data. docs/trainers.md says how to wire the loader instead."""


class AttentionLeakError(DataloaderdError):
    """A model given packed lines with ``position_ids`` lets a document attend
    to the one before it in its line (dataloaderd.trainers.hf.
    check_packed_attention): the message says how much the probe's logits
    moved and what to pass instead (docs/metadata.md)."""


class BatchTimeoutError(DataloaderdError, TimeoutError):
    """No batch came within the loader's ``batch_timeout``: the daemon or its
    producer is stuck (a hung filesystem, a stopped process). The loader is
    closed; resume from the last checkpoint with a new one."""


class CudaUnavailableError(TransportUnavailableError):
    """This process cannot use the GPU transports: no torch with CUDA, no NVIDIA
    driver, or no GPU. The ``shm`` and ``inline`` transports still work."""


class CudaError(DataloaderdError):
    """A CUDA driver call failed; ``call`` and ``result`` name it
    (e.g. ``cuIpcOpenMemHandle_v2``, ``CUDA_ERROR_INVALID_CONTEXT``)."""

    def __init__(self, call: str, result: str, message: str):
        super().__init__(message)
        self.call, self.result = call, result


_BY_CODE: Dict[grpc.StatusCode, Type[DataloaderdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: ConfigError,
    grpc.StatusCode.NOT_FOUND: SessionNotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: SessionExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: StateError,
    grpc.StatusCode.PERMISSION_DENIED: PathNotAllowedError,
    grpc.StatusCode.UNAVAILABLE: DaemonUnavailableError,
    grpc.StatusCode.UNIMPLEMENTED: TransportUnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DATA_LOSS: FileChangedError,
}


def from_rpc_error(err: grpc.RpcError) -> DataloaderdError:
    """The package's exception for a gRPC error; its message is the daemon's."""
    # A bare grpc.RpcError has neither method (its stub says it has both).
    code_of, details_of = getattr(err, "code", None), getattr(err, "details", None)
    code = code_of() if callable(code_of) else None
    details = details_of() if callable(details_of) else None
    status = code if isinstance(code, grpc.StatusCode) else None
    cls = DataloaderdError if status is None else _BY_CODE.get(status, DataloaderdError)
    name = None if status is None else status.name
    if not details:
        details = f"dataloaderd request failed ({name or 'no status'})"
    if status == grpc.StatusCode.UNAVAILABLE and "object storage" in details:
        # The daemon's object store, not the daemon (whose own UNAVAILABLE
        # makes the loader reconnect): the daemon's errors of object storage
        # all say "object storage".
        return ObjectStorageError(details, name)
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        # gRPC's own limit on a message, not a resource of the daemon's.
        return ConfigError(f"the request is too large for the daemon ({details}): a job config must be under "
                           "4 MiB; name a dataset's files by directory or glob rather than one by one", name)
    return cls(details, name)


F = TypeVar("F", bound=Callable[..., Any])


def translate(fn: F) -> F:
    """Decorator: re-raise grpc.RpcError as the package's exceptions."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err

    return cast(F, wrapper)  # wraps() keeps fn's signature; Python 3.9 has no ParamSpec to say so
