"""dataloaderd client: exact, shuffled, mixed, packed token batches from the
node's dataloaderd daemon, as zero-copy views of shared memory."""

from .errors import (ConfigError, DaemonUnavailableError, DataloaderdError, PathNotAllowedError,
                     SessionExistsError, SessionNotFoundError, StateError)
from .loader import Loader

__all__ = [
    "Loader",
    "DataloaderdError",
    "ConfigError",
    "SessionNotFoundError",
    "SessionExistsError",
    "StateError",
    "PathNotAllowedError",
    "DaemonUnavailableError",
]
__version__ = "0.1.0"
