"""accelerate (1.15): the loader's state in ``accelerator.save_state`` and
``accelerator.load_state`` of a hand-written loop (docs/trainers.md).

accelerate saves the objects given to ``register_for_checkpointing`` from the
main process only (``custom_checkpoint_<i>.pkl``, one rank's state dict),
and loads that one file into every rank: a Loader registered so saves one
rank's cursors and fails on the others. ``checkpoint_loader`` registers
save/load pre-hooks instead, which accelerate runs on every process: each
saves the loader with torch.distributed.checkpoint into
``<output_dir>/dataloaderd/`` (every rank writes its own shards' cursors) and
loads it back on the same or another number of ranks (DCP reshards: the
loader's state_dict()/load_state_dict()). torch and accelerate are imported
when used; ``dataloaderd`` itself imports neither.
"""

from __future__ import annotations

import os
from typing import Any, Tuple

from ..loader import Loader

__all__ = ["checkpoint_loader", "FOLDER"]

FOLDER = "dataloaderd"  # under accelerate's state folder: the loader's DCP checkpoint


def checkpoint_loader(accelerator: Any, loader: Loader) -> Tuple[Any, Any]:
    """Makes ``accelerator.save_state(dir)`` save ``loader`` into
    ``dir/dataloaderd/`` and ``accelerator.load_state(dir)`` restore it, on
    every rank; returns the two hooks' handles (``.remove()`` undoes them).

    Keep the Loader out of ``accelerator.prepare`` and out of a torch
    DataLoader: accelerate turns DataLoaders into ones that shard or
    dispatch their batches (an IterableDataset's from the main process only,
    so every rank would train on rank 0's stream), and the Loader already
    reads this rank's own. save_state and load_state must run on every
    process (DCP is a collective), as accelerate asks anyway."""
    if not isinstance(loader, Loader):
        raise TypeError(
            f"checkpoint_loader takes the dataloaderd Loader itself, got {type(loader).__module__}."
            f"{type(loader).__qualname__}: a Loader wrapped in a DataLoader and prepared by accelerate reads rank 0's "
            "stream on every rank (docs/trainers.md, accelerate)")
    import torch.distributed.checkpoint as dcp

    def save(models: Any, weights: Any, output_dir: str) -> None:
        dcp.save({"dataloader": loader}, checkpoint_id=os.path.join(output_dir, FOLDER))

    def load(models: Any, input_dir: str) -> None:
        dcp.load({"dataloader": loader}, checkpoint_id=os.path.join(input_dir, FOLDER))

    return accelerator.register_save_state_pre_hook(save), accelerator.register_load_state_pre_hook(load)
