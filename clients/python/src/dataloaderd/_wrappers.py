"""The loud error for a Loader iterated through a wrapper that takes it for
the whole job's one stream: accelerate's DataLoaderDispatcher (which Hugging
Face Trainer uses for an IterableDataset) reads it on the main process only
and splits each batch among the processes; its IterableDatasetShard (with
``dispatch_batches=False``) keeps one batch of every N on each. Each rank's
Loader already reads a stream of its own, so either silently drops the
other ranks' data (issue 25). docs/trainers.md says how to wire the loader
into Trainer instead (dataloaderd.trainers.hf)."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Optional

from .errors import ShardingError

__all__ = ["refuse_stream_splitters"]

# Classes of the packages below that split one stream among the processes.
_SPLITTERS = ("DataLoaderDispatcher", "IterableDatasetShard")
_PACKAGES = ("accelerate", "transformers")


def _processes(owner: object) -> int:
    """How many processes the splitter splits among (1 when it cannot say)."""
    n = getattr(owner, "num_processes", None)  # IterableDatasetShard
    if n is None:
        n = getattr(getattr(owner, "state", None), "num_processes", None)  # DataLoaderDispatcher's PartialState
    return n if isinstance(n, int) else 1


def refuse_stream_splitters(dp_rank: int, dp_size: int, depth: int = 2) -> None:
    """Raises ShardingError when a caller up the stack (from ``depth`` frames
    above this one) is one of the splitters, splitting among more than one
    process, and the loader is one of several data-parallel ranks. A walk of
    the frames once per ``iter(loader)``: no cost per batch."""
    if dp_size <= 1:
        return  # one stream for the job: a splitter takes nothing from anyone
    frame: Optional[FrameType] = sys._getframe(depth)
    while frame is not None:
        path = frame.f_code.co_filename
        if any(p in path for p in _PACKAGES):
            owner = frame.f_locals.get("self")
            cls = type(owner)
            if (cls.__name__ in _SPLITTERS and cls.__module__.split(".")[0] in _PACKAGES
                    and _processes(owner) > 1):
                raise ShardingError(
                    f"the Loader of dp_rank {dp_rank} of {dp_size} is iterated by {cls.__module__}.{cls.__name__}, "
                    f"which splits one stream among {_processes(owner)} processes: each rank's Loader reads a stream "
                    "of its own, so this would drop the other ranks' data (Hugging Face Trainer puts a "
                    "train_dataset that is an IterableDataset behind it). Give Trainer the loader through "
                    "dataloaderd.trainers.hf.LoaderTrainer, or in a loop of your own iterate the Loader directly "
                    "on every rank (docs/trainers.md)")
        frame = frame.f_back
