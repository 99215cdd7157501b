"""dataloaderd client: exact, shuffled, mixed, packed token batches from the
node's dataloaderd daemon, as zero-copy views of shared memory or of GPU
memory shared over CUDA IPC."""

from . import errors
from ._options import End, Transport
from .batch import Batch, DType, all_padding
from .errors import *  # noqa: F401,F403 - errors.__all__: every public error
from .explain import explain
from .loader import Loader

# The one export list: the loader, its batch and argument types, explain
# (which documents made a step's batches), and every public error
# (errors.__all__, which tests/test_client_units.py holds to the module's
# error classes).
__all__ = ["Loader", "Batch", "all_padding", "DType", "Transport", "End", "explain"]
__all__ += errors.__all__
__version__ = "0.1.0"
