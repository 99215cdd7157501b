"""One torchft replica group of a fault-tolerant job, fed by dataloaderd.

torchft (pinned 0.2.0 in the Makefile) keeps the healthy replica groups
training while a failed one restarts and heals its weights from a live peer.
Each group reads its own stream: ``dp_rank`` = group x group size + rank
in the group, ``dp_size`` = the most groups x group size. The loop's data
rules, docs/rank-restart.md "torchft":

- a step that does not commit (``should_commit()`` False) or in which the
  group did not take part (healing: its gradients were not used) gives its
  batch back: ``loader.give_back()``, and the next step trains on it;
- a group's restarted process makes the same ``Loader(cfg)``: the daemon
  kept the dead process's session (``--keep-detached``) at the last batch
  it released, and the batch it held comes again.

So a group that fails and heals loses no batch and repeats none: its
committed batches, over all its processes, are its uninterrupted stream.

Run one process per group (the lighthouse first: ``torchft_lighthouse
--min_replicas 1`` or torchft._torchft.LighthouseServer):

    TORCHFT_LIGHTHOUSE=http://localhost:29510 python examples/train_torchft.py \
        --config job.yaml --group 0 --groups 2 --steps 100 --store-port 29600

``--data sampler`` reads the same corpus through torchft's own
DistributedSampler (a DataLoader over lines of the corpus, restarted from
its epoch's start by a new process), the comparison in docs/rank-restart.md.
``--log`` appends each committed batch (trainer step, data step, tokens) for
tests and the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import sys
import time
from datetime import timedelta
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed import TCPStore

from torchft import Manager, ProcessGroupGloo
from torchft.data import DistributedSampler

VOCAB = 4096


def batches_dataloaderd(args: argparse.Namespace, cfg: Dict[str, Any]) -> Tuple[Any, Iterator[Tuple[int, Any]]]:
    """The group's loader and its (data step, tokens): the plain constructor,
    so a restarted process goes on where the dead one left off."""
    from dataloaderd import Loader
    loader = Loader(cfg, dp_rank=args.group, dp_size=args.groups, socket=args.socket, job=args.job)
    return loader, stream_of(loader)


def stream_of(loader: Any) -> Iterator[Tuple[int, Any]]:
    return ((b["step"], torch.from_numpy(np.array(b["tokens"]))) for b in loader)


class Positions:
    """--positions: the group saves its state after every committed step into
    one folder a world (``world-<n>``, every group's file), and when a group
    misses --take-over-after quorums in a row, the live groups take over its
    shards: each opens rank ``participating_rank()`` of the live groups'
    world from that folder (a rescale: every shard goes on where its owner
    last committed). docs/rank-restart.md, "A group that stays down"."""

    def __init__(self, args: argparse.Namespace, cfg: Dict[str, Any], loader: Any):
        self.args, self.cfg, self.loader = args, cfg, loader
        self.world, self.gen, self.missing, self.seen_whole = args.groups, 0, 0, False
        later = [d for d in os.listdir(args.positions) if d.startswith("world-") and d != "world-0"] \
            if os.path.isdir(args.positions) else []
        if later:
            sys.exit(f"group {args.group}: the live groups took over the shards of groups that stayed down "
                     f"({', '.join(sorted(later))} in {args.positions}); this group's stream is theirs now")
        loader.save(self.folder())  # the world's folder is whole from the start

    def folder(self) -> str:
        return os.path.join(self.args.positions, f"world-{self.gen}")

    def committed(self) -> None:
        self.loader.save(self.folder())

    def quorum(self, manager: Manager) -> Optional[Iterator[Tuple[int, Any]]]:
        """After start_quorum: a new stream when this step takes over."""
        n = manager.num_participants()
        self.seen_whole = self.seen_whole or n == self.world
        self.missing = self.missing + 1 if self.seen_whole and n < self.world else 0
        if self.missing < self.args.take_over_after or not manager.is_participating():
            return None
        from dataloaderd import Loader
        rank, before = manager.participating_rank(), self.folder()
        self.loader.close()
        self.gen, self.world, self.missing = self.gen + 1, n, 0
        self.loader = Loader(self.cfg, dp_rank=rank, dp_size=n, socket=self.args.socket, job=self.args.job,
                             resume_from=before)
        self.loader.save(self.folder())
        return stream_of(self.loader)


def batches_sampler(args: argparse.Namespace, cfg: Dict[str, Any]) -> Tuple[Any, Iterator[Tuple[int, Any]]]:
    """torchft's way: a map-style dataset of the corpus's lines, sharded over
    the most groups by torchft.data.DistributedSampler; a new process starts
    its epoch over (a step's number is the line index of its first line, + 1)."""
    width = cfg["seq_len"] + 1
    tokens = np.concatenate([np.fromfile(d["path"] + ".bin", dtype=np.int32) for d in cfg["datasets"]])
    lines = torch.as_tensor(tokens[: len(tokens) // width * width].reshape(-1, width))
    sampler = DistributedSampler(range(len(lines)), replica_rank=args.group, num_replica_groups=args.groups,
                                 group_rank=0, num_replicas=1, shuffle=True, seed=cfg["seed"])
    data = torch.utils.data.DataLoader(range(len(lines)), batch_size=cfg["batch_size"], sampler=sampler)
    return None, ((int(idx[0]) + 1, lines[idx]) for idx in data)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


def log_committed(path: str, step: int, data_step: int, tokens: torch.Tensor) -> None:
    """Appends one committed batch, flushed, so a kill -9 loses none logged."""
    t = np.ascontiguousarray(tokens.numpy().astype("<i4")).ravel()
    with open(path, "ab") as f:
        f.write(struct.pack("<QQI", step, data_step, t.size) + t.tobytes())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="job config (JSON or YAML)")
    p.add_argument("--group", type=int, required=True)
    p.add_argument("--groups", type=int, required=True, help="the most replica groups the job may have")
    p.add_argument("--steps", type=int, required=True, help="trainer steps to commit")
    p.add_argument("--store-port", type=int, required=True, help="the group's TCPStore port")
    p.add_argument("--socket", default=None)
    p.add_argument("--job", default="torchft")
    p.add_argument("--data", choices=["dataloaderd", "sampler"], default="dataloaderd")
    p.add_argument("--log", default=None)
    p.add_argument("--pause", type=float, default=0.0, help="seconds a step sleeps (tests: kills land mid-run)")
    p.add_argument("--positions", default=None, help="folder of the groups' saved states (Positions)")
    p.add_argument("--take-over-after", type=int, default=3, help="quorums a group may miss before its shards move")
    p.add_argument("--die-at", type=int, default=0, help="kill -9 this process as it takes its n-th batch (tests)")
    p.add_argument("--wait-for", type=int, default=0, help="groups to wait for in a quorum before training")
    args = p.parse_args()
    with open(args.config) as f:
        cfg = json.load(f) if args.config.endswith(".json") else __import__("yaml").safe_load(f)

    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def load_state_dict(sd: Dict[str, Any]) -> None:  # a peer's weights, when this group heals
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict() -> Dict[str, Any]:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    store = TCPStore("localhost", args.store_port, 1, True, wait_for_workers=False)
    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=10)), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict, replica_id=f"group{args.group}",
                      rank=0, world_size=1, store_addr="localhost", store_port=args.store_port,
                      timeout=timedelta(seconds=10), quorum_timeout=timedelta(seconds=30))
    loader, batches = (batches_dataloaderd if args.data == "dataloaderd" else batches_sampler)(args, cfg)

    while manager.num_participants() < args.wait_for:  # empty steps until the groups are there
        manager.start_quorum()
        if manager.num_participants() < args.wait_for:
            manager.should_commit()
            time.sleep(0.05)
    positions = Positions(args, cfg, loader) if args.positions and loader is not None else None
    taken = 0
    while manager.current_step() < args.steps:
        manager.start_quorum()
        moved = positions.quorum(manager) if positions is not None else None
        if moved is not None and positions is not None:
            loader, batches = positions.loader, moved
        got = next(batches, None)
        if got is None:
            break  # the group's stream ended
        data_step, tokens = got
        taken += 1
        if taken == args.die_at:  # a crash mid-step, before the gradients are reduced
            os.kill(os.getpid(), signal.SIGKILL)
        x = tokens.long() % VOCAB
        opt.zero_grad()
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        # The gradients averaged over the participating groups. (Not
        # torchft.ddp.DistributedDataParallel: in 0.2.0 its hook fails an
        # assert, killing the live group, when a peer dies mid-reduce.)
        for p in model.parameters():
            manager.allreduce(p.grad).wait()
        took_part = manager.is_participating()  # False while healing: its gradients count as zero
        step = manager.current_step()
        if args.pause:
            time.sleep(args.pause)
        if manager.should_commit():
            opt.step()
            if took_part and args.log:
                log_committed(args.log, step + 1, data_step, tokens)
            if took_part:
                if positions is not None:
                    positions.committed()
                continue
        if loader is not None:
            loader.give_back()  # not trained on: the next step takes it again
    if loader is not None:
        loader.close()
    manager.shutdown(wait=False)
    del store
    sys.exit(0)


if __name__ == "__main__":
    os.environ.setdefault("TORCHFT_LIGHTHOUSE", "http://localhost:29510")
    main()
