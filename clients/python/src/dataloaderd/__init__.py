"""dataloaderd client: exact, shuffled, mixed, packed token batches from the
node's dataloaderd daemon, as zero-copy views of shared memory or of GPU
memory shared over CUDA IPC."""

from .batch import Batch, all_padding
from .errors import (BatchTimeoutError, ConfigError, CudaError, CudaUnavailableError, DaemonUnavailableError,
                     DataloaderdError, FileChangedError, ObjectStorageError, PathNotAllowedError, ResourceExhaustedError,
                     SessionExistsError, SessionNotFoundError, StateError, TransportUnavailableError)
from .loader import Loader

__all__ = [
    "Loader",
    "Batch",
    "all_padding",
    "DataloaderdError",
    "ConfigError",
    "SessionNotFoundError",
    "SessionExistsError",
    "StateError",
    "PathNotAllowedError",
    "DaemonUnavailableError",
    "ObjectStorageError",
    "TransportUnavailableError",
    "CudaUnavailableError",
    "CudaError",
    "ResourceExhaustedError",
    "BatchTimeoutError",
    "FileChangedError",
]
__version__ = "0.1.0"
