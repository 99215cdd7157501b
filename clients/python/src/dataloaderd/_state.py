"""A rank's state as a state dict, split by shard for torch.distributed.checkpoint.

``{"version": 2, "run": bytes, "shards": {"<dataset>": {"<shard>": int64[6]}}}``:
``run`` is the run-wide part (fingerprint, step, mixture log), the same bytes
on every rank of a world, so DCP keeps one copy; ``shards`` holds, under keys
no other rank has, the cursor of each logical shard this rank owns (datasets
and shards by their index in the config). DCP saves each shard's cursor from
its owner, and on a resume with another dp_size loads into each rank the
cursors of the shards it owns now: its own resharding, with nothing added
across ranks. The state before the first batch (an empty run and zero
cursors, the template DCP asks for before a load) is the daemon's to say
(StateTemplate): which shards a rank owns is its rule, which the client does
not copy.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping

import numpy as np

from ._proto import dataloader_pb2 as pb
from .errors import StateError

__all__ = ["VERSION", "from_sharded", "to_sharded", "step_of", "check_v1"]

VERSION = 2
# A shard's cursor: the fields of the daemon's ShardState message after its
# (dataset, shard) key, in the message's order (the wire says; the client
# copies no list of internal/state.Shard).
FIELDS = tuple(f.name for f in pb.ShardState.DESCRIPTOR.fields if f.name not in ("dataset", "shard"))


def _cursor(values: List[int]) -> Any:
    """A cursor as DCP stores it best: an int64 tensor, or a numpy array
    without torch."""
    try:
        import torch
    except ImportError:
        return np.array(values, dtype=np.int64)
    return torch.tensor(values, dtype=torch.int64)


def from_sharded(state: pb.ShardedState) -> Dict[str, Any]:
    """The state dict of the daemon's split state (GetState's, or
    StateTemplate's: the state before the first batch)."""
    shards: Dict[str, Dict[str, Any]] = {}
    for sh in state.shards:
        shards.setdefault(str(sh.dataset), {})[str(sh.shard)] = _cursor([getattr(sh, f) for f in FIELDS])
    return {"version": VERSION, "run": bytes(state.run), "shards": shards}


def to_sharded(sd: Mapping[str, Any], owned: Callable[[], pb.ShardedState], dp_rank: int,
               dp_size: int) -> pb.ShardedState:
    """The daemon's form of a state dict, checked to hold the cursors of
    exactly the shards this rank owns: those of the daemon's template,
    owned() (what DCP loads into a rank whose template state_dict() gave),
    asked for once the dict's own form is checked."""
    run, shards = sd.get("run"), sd.get("shards")
    if not isinstance(run, (bytes, bytearray)) or not isinstance(shards, Mapping):
        raise StateError("not a dataloaderd state dict: it needs 'run' (bytes) and 'shards' (a dict)")
    out = pb.ShardedState(run=bytes(run))
    got = set()
    for dkey, per_dataset in shards.items():
        if not isinstance(per_dataset, Mapping):
            raise StateError(f"state dict: shards[{dkey!r}] is not a dict of shard cursors")
        for skey, value in per_dataset.items():
            try:
                ident = (int(dkey), int(skey))
                values = [int(v) for v in np.asarray(value).reshape(-1).tolist()]
            except (TypeError, ValueError) as e:
                raise StateError(f"state dict: shards[{dkey!r}][{skey!r}] is not a shard cursor: {e}") from e
            if len(values) != len(FIELDS) or min(values) < 0:
                raise StateError(f"state dict: shards[{dkey!r}][{skey!r}] holds {values}, want {len(FIELDS)} counts >= 0")
            got.add(ident)
            out.shards.append(pb.ShardState(dataset=ident[0], shard=ident[1], **dict(zip(FIELDS, values))))
    template = owned().shards
    want = {(sh.dataset, sh.shard) for sh in template}
    ks = [sh.shard for sh in template]  # a block of each dataset, by the daemon's rule
    lo, hi = (min(ks), max(ks) + 1) if ks else (0, 0)
    if got != want:
        missing, extra = sorted(want - got), sorted(got - want)
        raise StateError(
            f"the state dict holds the cursors of {len(got)} shards, dp_rank {dp_rank} of {dp_size} owns "
            f"{len(want)} (shards {lo} to {hi - 1} of each dataset)"
            + (f"; missing (dataset, shard) {missing[:4]}" if missing else "")
            + (f"; not its own {extra[:4]}" if extra else "")
            + ": load into each rank the state dict its own state_dict() templated (torch.distributed.checkpoint does)")
    return out


def step_of(run: bytes) -> int:
    """The step a run part was saved at (0 for the state before the first batch)."""
    if not run:
        return 0
    try:
        return int(json.loads(run)["step"])
    except (ValueError, KeyError, TypeError) as e:
        raise StateError(f"state dict: its run part is not a dataloaderd state ({e})") from e


def check_v1(sd: Mapping[str, Any], dp_rank: int, dp_size: int) -> int:
    """Checks a version 1 state dict (one rank's state file) for rank dp_rank
    of dp_size and returns its step."""
    try:
        rank, size, step = sd["dp_rank"], sd["dp_size"], int(sd["step"])
        bytes(sd["state"])
    except (KeyError, TypeError, ValueError) as e:
        raise StateError(f"not a dataloaderd state dict: missing or bad {e}") from e
    if size != dp_size:
        raise StateError(
            f"state dict is from dp_size {size}, this loader has dp_size {dp_size}: a version 1 state dict "
            "holds one rank's shards; to resume onto another dp_size pass resume_from=<checkpoint folder>")
    if rank != dp_rank:
        raise StateError(
            f"state dict is dp_rank {rank}'s, this loader is dp_rank {dp_rank}: load each "
            "rank's own state dict, or pass resume_from=<checkpoint folder>")
    return step
