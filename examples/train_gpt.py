"""A tiny GPT trained with DDP on dataloaderd batches, checkpointed with
torch.distributed.checkpoint (model, optimizer and loader together).

Run it under torchrun next to a daemon, e.g. with the wrapper:

    deploy/torchrun-with-dataloaderd.sh --standalone --nproc-per-node 2 examples/train_gpt.py \\
        --config job.json --ckpt /tmp/ckpt --save-every 10 --records /tmp/records

and again with --resume (on any number of processes) to go on from the last
checkpoint. One bounded epoch: every rank pads after its last batch
(end="pad") until all of them do, so they all take the same steps.
tests_torch/test_train_gpt.py runs it: kill -9 of the whole job, a resume
on another world size, every token exactly once.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.nn.parallel import DistributedDataParallel as DDP

from dataloaderd import Loader, all_padding


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        n = x.shape[1]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, seq_len, dim=32, layers=2, heads=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq_len, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1])
        return self.head(self.blocks(self.tok(input_ids) + self.pos(pos)))


class Trainer(Stateful):
    """The model and optimizer as one DCP entry (torchtitan's way)."""

    def __init__(self, model, optim):
        self.model, self.optim = model, optim

    def state_dict(self):
        model, optim = get_state_dict(self.model, self.optim)
        return {"model": model, "optim": optim}

    def load_state_dict(self, sd):
        set_state_dict(self.model, self.optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"])


def record(log, batch, loss, **extra):
    """One line of the rank's record (what the tests check exactly once
    against): the step, its loss and the tokens trained on (none for a
    padding batch)."""
    tokens = [] if batch["padding"] else batch["tokens"].reshape(-1).tolist()
    log.write(json.dumps({"step": batch["step"], "batch_id": batch.get("batch_id"), **extra, "loss": loss.item(),
                          "padding": batch["padding"], "tokens": tokens}) + "\n")
    log.flush()


def point_latest(ckpt, name):
    """Points <ckpt>/latest at the checkpoint `name`, once it is whole (on one
    rank, after every rank saved)."""
    latest = os.path.join(ckpt, "latest")
    with open(latest + ".tmp", "w") as f:
        f.write(name)
    os.replace(latest + ".tmp", latest)


def arguments(doc, ckpt_help="checkpoint folder: step-<s>/ per save, 'latest' names the last whole one"):
    """The examples' command line (the tests' torchrun_job.launch_script gives it)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--config", required=True, help="the job config (JSON), as Loader takes it")
    p.add_argument("--vocab", type=int, required=True, help="vocabulary size (largest token id + 1)")
    p.add_argument("--ckpt", required=True, help=ckpt_help)
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--records", required=True, help="folder of per-rank JSON lines: step, loss, tokens")
    p.add_argument("--resume", action="store_true", help="go on from the latest checkpoint, if there is one")
    return p


def train(args):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    with open(args.config) as f:
        config = json.load(f)
    if getattr(args, "skip_steps", None):  # after a loss spike: docs/loss-spike.md
        first, last = (int(x) for x in args.skip_steps.split("-"))
        config["skip_steps"] = config.get("skip_steps", []) + [[first, last]]
    model = DDP(TinyGPT(args.vocab, config["seq_len"]))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    trainer = Trainer(model, optim)
    latest = os.path.join(args.ckpt, "latest")
    with Loader(config, end="pad") as loader:  # dp_rank, dp_size and the socket from torchrun's environment
        if args.resume and os.path.exists(latest):
            with open(latest) as f:
                step_dir = f.read().strip()
            step_dir = args.start or step_dir  # --from: an earlier checkpoint (docs/loss-spike.md)
            dcp.load({"trainer": trainer, "dataloader": loader}, checkpoint_id=os.path.join(args.ckpt, step_dir))
        log = open(os.path.join(args.records, f"rank-{rank}-of-{world}.jsonl"), "a")
        for batch in loader:
            if all_padding(batch):
                break  # every rank is past its data: the epoch is over, at the same step everywhere
            logits = model(batch["input_ids"])
            loss = F.cross_entropy(logits.flatten(0, 1), batch["shift_labels"].flatten())
            optim.zero_grad()
            (loss * (0.0 if batch["padding"] else 1.0)).backward()  # a padding step still joins DDP's all-reduce
            optim.step()
            record(log, batch, loss)
            if batch["step"] % args.save_every == 0:
                step_dir = f"step-{batch['step']}"
                dcp.save({"trainer": trainer, "dataloader": loader}, checkpoint_id=os.path.join(args.ckpt, step_dir))
                dist.barrier()
                if rank == 0:  # the checkpoint is whole: point at it
                    point_latest(args.ckpt, step_dir)
    dist.destroy_process_group()


def main():
    p = arguments(__doc__)
    p.add_argument("--from", dest="start", metavar="STEP_DIR",
                   help="with --resume: go on from this checkpoint of --ckpt (e.g. step-20) instead of the latest")
    p.add_argument("--skip-steps", metavar="FIRST-LAST",
                   help="with --resume: never train on the data of steps FIRST to LAST (the config key skip_steps); "
                        "docs/loss-spike.md")
    train(p.parse_args())


if __name__ == "__main__":
    main()
