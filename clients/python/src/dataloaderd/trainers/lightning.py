"""Lightning (``lightning`` 2.6): the loader under ``lightning.pytorch``'s
Trainer, as a LightningDataModule, and under ``lightning.fabric``'s Fabric,
as a state object of ``fabric.save``/``fabric.load`` (docs/trainers.md).

Lightning writes a checkpoint from global rank 0 alone, one file, which
every rank reads back. Every rank's cursors reach that file by one gather
at save time: the state saved is the union of the ranks' state dicts (the
loader's own version 2 dict, ``{"version", "run", "shards"}``, whose shards
are under keys only their owner has), and a rank that loads it takes the
shards it owns, on the same or another number of ranks, as
torch.distributed.checkpoint would. Imports ``lightning`` (this module only)
and torch.distributed when used; ``dataloaderd`` itself does not.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import lightning.pytorch as pl
import numpy as np

from ..batch import Batch, all_padding
from ..errors import ConfigError, StateError
from ..loader import Loader

__all__ = ["LoaderDataModule", "LoaderState", "gather_state", "own_state"]


def gather_state(state: Mapping[str, Any]) -> Dict[str, Any]:
    """Every rank's state dict (loader.state_dict()) folded into one: the run
    part, which is the same on every rank, and the cursors of every logical
    shard of the world. A collective: every rank of the default process
    group calls it at the same point (Lightning's and Fabric's saves do).
    Plain ints and bytes, so any checkpoint format stores it."""
    mine = {"run": bytes(state["run"]),
            "shards": {str(d): {str(s): [int(v) for v in np.asarray(c).reshape(-1).tolist()] for s, c in per.items()}
                       for d, per in state["shards"].items()}}
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        states: List[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(states, mine)
    else:
        states = [mine]
    runs = {s["run"] for s in states}
    if len(runs) != 1:
        steps = [s["run"][:80] for s in states]
        raise StateError(f"the ranks' loaders are at different steps or runs, so no one state holds them: {steps}; "
                         "save on every rank at the same step")
    shards: Dict[str, Dict[str, List[int]]] = {}
    for s in states:
        for d, per in s["shards"].items():
            shards.setdefault(d, {}).update(per)
    return {"version": state["version"], "run": runs.pop(), "shards": shards, "ranks": len(states)}


def own_state(loader: Loader, gathered: Mapping[str, Any]) -> Dict[str, Any]:
    """The part of a gathered state (gather_state) that loader's rank owns:
    its state dict, for loader.load_state_dict, on any dp_size."""
    own = loader.state_dict()["shards"]  # this rank's shards (before the first batch, the daemon's template)
    try:
        shards = {d: {s: gathered["shards"][d][s] for s in per} for d, per in own.items()}
    except KeyError as e:
        raise StateError(f"the saved loader state has no cursor for dataset/shard {e} that dp_rank {loader.dp_rank} "
                         f"of {loader.dp_size} owns: it was not saved from every rank (gather_state)") from None
    return {"version": gathered["version"], "run": gathered["run"], "shards": shards}


class LoaderState:
    """A Loader as a state object of Fabric's checkpoints: put it in the state
    dict given to ``fabric.save`` and ``fabric.load`` (every rank calls both),
    never the Loader itself, whose state is its own rank's only."""

    def __init__(self, loader: Loader):
        self.loader = loader

    def state_dict(self) -> Dict[str, Any]:
        return gather_state(self.loader.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(own_state(self.loader, state))


class _Stream:
    """The batches a Trainer iterates: the loader's until every rank pads
    (all_padding, a collective Lightning's fetch makes in the same order on
    every rank), so that every rank ends the epoch at the same step. Before
    each batch it keeps the state after the one before: Lightning fetches a
    batch ahead of the one it trains on, and a checkpoint holds the latter."""

    def __init__(self, loader: Loader):
        self.loader = loader
        self.before: Optional[Tuple[int, Dict[str, Any]]] = None  # (step s, the state after s - 1)
        self.since: List[Tuple[int, Dict[str, float]]] = []  # set_weights calls not in before's log

    def __iter__(self) -> Iterator[Batch]:
        batches = iter(self.loader)
        while True:
            before = self.loader.state_dict()
            batch = next(batches, None)
            if batch is None:
                return
            self.before, self.since = (batch["step"], before), []
            if all_padding(batch):
                return
            yield batch


class LoaderDataModule(pl.LightningDataModule):  # type: ignore[misc]  # Any without lightning's stubs
    """The loader as a LightningDataModule: ``Trainer.fit(model, datamodule=
    LoaderDataModule(config))`` under DDP. Each rank reads its own stream
    (dp_rank/dp_size default to the trainer's global rank and world size;
    no sampler is added: Lightning adds one to torch DataLoaders only), the
    checkpoint holds every rank's cursors (the datamodule's state, gathered
    from all ranks at each save), a resume on any number of ranks goes on
    after the step trained last, and the epoch ends on every rank at the same
    step (``end="pad"``; run with ``max_epochs=1``: the config's ``epochs``
    bound the data). ``loader_args`` are Loader's; ``end`` is "pad" and
    ``copy`` True (Lightning keeps a batch while it fetches the next, which
    would release a batch's ring slot under it)."""

    def __init__(self, config: Union[str, os.PathLike[str], Mapping[str, object]], **loader_args: Any):
        super().__init__()
        for key, want in (("end", "pad"), ("copy", True)):
            if loader_args.setdefault(key, want) != want:
                raise ConfigError(f"LoaderDataModule: {key}={loader_args[key]!r}; under Lightning it must be {want!r} "
                                  "(docs/trainers.md, Lightning)")
        self.config, self.loader_args = config, loader_args
        self._stream: Optional[_Stream] = None
        self._pending: Optional[Mapping[str, Any]] = None  # a state loaded before the loader was made
        self._trained = 0  # the step of the last batch handed to training_step

    @property
    def loader(self) -> Loader:
        """This rank's Loader, made by the first train_dataloader()."""
        if self._stream is None:
            raise StateError("LoaderDataModule: no loader before Trainer.fit asks for train_dataloader()")
        return self._stream.loader

    def train_dataloader(self) -> Any:
        if self._stream is None:
            args = dict(self.loader_args)
            if self.trainer is not None:
                args.setdefault("dp_rank", self.trainer.global_rank)
                args.setdefault("dp_size", self.trainer.world_size)
            self._stream = _Stream(Loader(self.config, **args))
            if self._pending is not None:
                self._restore(self._pending)
        return self._stream

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if isinstance(batch, dict) and "step" in batch and self.trainer is not None and self.trainer.training:
            self._trained = int(batch["step"])
        return batch

    def set_weights(self, weights: Mapping[str, float], step: Optional[int] = None) -> None:
        """loader.set_weights from the first step Lightning has not fetched
        yet (by default; a fetched step raises StateError): call it on every
        rank at the same step (a callback's hook). Kept with the checkpoint."""
        first = self.loader.step + 1 if step is None else int(step)
        self.loader.set_weights(weights, first)
        if self._stream is not None:
            self._stream.since.append((first, dict(weights)))

    def state_dict(self) -> Dict[str, Any]:
        if self._stream is None:
            return {}
        loader, before, trained = self.loader, self._stream.before, self._trained
        changes: List[Tuple[int, Dict[str, float]]] = []
        if loader.step == trained:
            state = loader.state_dict()
        elif before is not None and before[0] == trained + 1 and loader.step == trained + 1:
            # Taken before the fetch of step trained + 1; a mixture change
            # made since is not in its log: it is kept beside it.
            state, changes = before[1], self._stream.since
        else:
            raise StateError(f"LoaderDataModule: the loader is at step {loader.step} but step {trained} was trained "
                             "last, more than one fetched ahead: is on_before_batch_transfer overridden in the model?")
        return {"loader": gather_state(state), "weights": [[f, w] for f, w in changes]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if not state_dict:
            return
        if self._stream is None:
            self._pending = state_dict
        else:
            self._restore(state_dict)

    def _restore(self, state: Mapping[str, Any]) -> None:
        self._pending = None
        self.loader.load_state_dict(own_state(self.loader, state["loader"]))
        self._trained = self.loader.step
        for first, weights in state.get("weights", []):
            self.set_weights(weights, int(first))

    def teardown(self, stage: str) -> None:
        if self._stream is not None:
            self._stream.loader.close()
