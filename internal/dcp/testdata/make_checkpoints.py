"""Writes the DCP checkpoints internal/dcp's and cmd/dataloaderd's tests read.

Regenerate (from the repository root) with the torch environment:

    /work/main/.venv-torch/bin/python internal/dcp/testdata/make_checkpoints.py  # or .venv-torch of `make setup`

Each folder is written by torch.distributed.checkpoint.save, as the README's
trainer writes one, from a state dict of the shape dataloaderd.Loader's
state_dict() has (clients/python/src/dataloaderd/_state.py): {"version": 2,
"run": bytes (the daemon's run part: state.Split's JSON), "shards":
{"<dataset>": {"<shard>": int64[6] tensor}}}, the cursor's fields in
ShardState's order (lines, epoch, pos, offset, taken, base).

  loader/  2 ranks (gloo), the state under "dataloader" beside a trainer's
           model, optimizer-like values and a step: rank 0 owns shards 0-1
           of each of 2 datasets, rank 1 shards 2-3; step 57; a schedule and
           a change of weights queued for step 60.
  nested/  1 rank, the state under "state" -> "train_loader" (the FQN
           prefix "state.train_loader").
  none/    1 rank, a trainer's state and no loader's.
"""

import json
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
FINGERPRINT = {
    "seq_len": 128, "logical_shards": 4, "seed": 9, "eos_id": 0, "bos_id": -1, "shuffle_window": 8,
    "datasets": [
        {"name": "web", "format": "megatron", "files": 1, "bytes": 100, "units": 10, "digest": "ab"},
        {"name": "code", "format": "tokens", "files": 2, "bytes": 50, "units": 4, "digest": "cd"},
    ],
}
MIXTURE = [
    {"step": 0, "weights": [3, 1]},
    {"step": 40, "weights": [1, 1], "schedule": [{"step": 0, "weights": [1, 1]}, {"step": 100, "weights": [0, 1], "linear": True}]},
    {"step": 60, "weights": [0, 1], "runtime": True},
]


def run_part(step, dp_size):
    return json.dumps({"version": 3, "step": step, "fingerprint": FINGERPRINT, "mixture": MIXTURE,
                       "dp_size": dp_size}).encode()


def cursor(d, s):
    """Shard s of dataset d: lines, epoch, pos, offset, taken, base, each
    distinct so that a test sees a field read from the wrong place."""
    return torch.tensor([100 * d + 10 * s + 7, d, 1000 + s, 2000 + d, s % 3, 5], dtype=torch.int64)


def loader_state(shards, step, dp_size):
    return {"version": 2, "run": run_part(step, dp_size),
            "shards": {str(d): {str(s): cursor(d, s) for s in shards} for d in range(2)}}


def trainer_state():
    torch.manual_seed(0)
    return {"model": {"w": torch.randn(4, 4), "b": torch.zeros(4)}, "optim": {"lr": 0.1, "betas": (0.9, 0.99)}, "step": 57}


def two_ranks(rank, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    owned = [0, 1] if rank == 0 else [2, 3]
    sd = {"trainer": trainer_state(), "dataloader": loader_state(owned, 57, 2)}
    dcp.save(sd, checkpoint_id=os.path.join(HERE, "loader"))
    dist.destroy_process_group()


def main():
    for name in ("loader", "nested", "none"):
        shutil.rmtree(os.path.join(HERE, name), ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(two_ranks, args=("file://" + os.path.join(tmp, "store"),), nprocs=2)
    dcp.save({"state": {"train_loader": loader_state([0, 1, 2, 3], 12, 1)}}, checkpoint_id=os.path.join(HERE, "nested"))
    dcp.save({"trainer": trainer_state()}, checkpoint_id=os.path.join(HERE, "none"))


if __name__ == "__main__":
    sys.exit(main())
