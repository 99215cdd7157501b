"""The exceptions of the dataloaderd client. Every gRPC error is turned into one
of these (``raise ... from``), so callers never catch gRPC internals."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, TypeVar

import grpc

__all__ = [
    "DataloaderdError",
    "ConfigError",
    "SessionNotFoundError",
    "SessionExistsError",
    "StateError",
    "PathNotAllowedError",
    "DaemonUnavailableError",
    "TransportUnavailableError",
    "ResourceExhaustedError",
    "BatchTimeoutError",
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
    """The job config, a request argument, or a dataset is invalid."""


class SessionNotFoundError(DataloaderdError):
    """The session is closed, was reclaimed, or never existed."""


class SessionExistsError(DataloaderdError):
    """The (job, dp_rank) session is already open, or all its consumers joined."""


class StateError(DataloaderdError):
    """A saved state does not match the corpus or config, or a step is not available."""


class PathNotAllowedError(DataloaderdError, PermissionError):
    """A path lies outside every --allow-root of the daemon."""


class DaemonUnavailableError(DataloaderdError, ConnectionError):
    """The daemon is not running, not reachable, or shutting down."""


class TransportUnavailableError(DataloaderdError):
    """The transport asked for cannot be used here (e.g. ``cuda`` on a daemon
    without a CUDA driver, or a client without torch and a GPU); ``shm`` and
    ``inline`` work everywhere."""


class ResourceExhaustedError(DataloaderdError):
    """The daemon is out of a resource the session needs (e.g. GPU memory for a
    device ring)."""


class BatchTimeoutError(DataloaderdError, TimeoutError):
    """No batch came within the loader's ``batch_timeout``: the daemon or its
    producer is stuck (a hung filesystem, a stopped process). The loader is
    closed; resume from the last checkpoint with a new one."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: ConfigError,
    grpc.StatusCode.NOT_FOUND: SessionNotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: SessionExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: StateError,
    grpc.StatusCode.PERMISSION_DENIED: PathNotAllowedError,
    grpc.StatusCode.UNAVAILABLE: DaemonUnavailableError,
    grpc.StatusCode.UNIMPLEMENTED: TransportUnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
}


def from_rpc_error(err: grpc.RpcError) -> DataloaderdError:
    """The package's exception for a gRPC error; its message is the daemon's."""
    code = err.code() if callable(getattr(err, "code", None)) else None
    details = err.details() if callable(getattr(err, "details", None)) else None
    cls = _BY_CODE.get(code, DataloaderdError)
    name = code.name if isinstance(code, grpc.StatusCode) else None
    if not details:
        details = f"dataloaderd request failed ({name or 'no status'})"
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

    return wrapper  # type: ignore[return-value]
