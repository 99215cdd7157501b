"""examples/train_gpt.py's loop under Lightning Fabric (DDP, CPU): the loader
iterated as it is, checkpointed by fabric.save/fabric.load through
dataloaderd.trainers.lightning.LoaderState, which folds every rank's cursors
into Fabric's one checkpoint file and gives each rank its own back, on any
number of ranks.

    deploy/torchrun-with-dataloaderd.sh --standalone --nproc-per-node 2 examples/train_fabric.py \\
        --config job.json --vocab 4000 --ckpt /tmp/ckpt --save-every 5 --records /tmp/records [--resume]

tests_torch/test_trainer_lightning.py runs it: kill -9, a resume on 3 ranks,
every token exactly once.
"""

import json
import os

import torch
import torch.nn.functional as F
from lightning.fabric import Fabric

from dataloaderd import Loader, all_padding
from dataloaderd.trainers.lightning import LoaderState
from train_gpt import TinyGPT, arguments, point_latest, record


def train(args):
    fabric = Fabric(accelerator="cpu", strategy="ddp", devices=int(os.environ["LOCAL_WORLD_SIZE"]), num_nodes=1)
    fabric.launch()  # under torchrun: the processes are there already
    fabric.seed_everything(0)
    with open(args.config) as f:
        config = json.load(f)
    model = TinyGPT(args.vocab, config["seq_len"])
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optim = fabric.setup(model, optim)
    latest = os.path.join(args.ckpt, "latest")
    log = open(os.path.join(args.records, f"rank-{fabric.global_rank}-of-{fabric.world_size}.jsonl"), "a")
    with Loader(config, end="pad") as loader:  # not fabric.setup_dataloaders: it takes torch DataLoaders only
        state = {"model": model, "optim": optim, "loader": LoaderState(loader)}
        if args.resume and os.path.exists(latest):
            with open(latest) as f:
                fabric.load(os.path.join(args.ckpt, f.read().strip() + ".ckpt"), state)
        for batch in loader:
            if all_padding(batch):
                break  # every rank is past its data: the epoch is over, at the same step everywhere
            logits = model(batch["input_ids"])
            loss = F.cross_entropy(logits.flatten(0, 1), batch["shift_labels"].flatten())
            optim.zero_grad()
            fabric.backward(loss * (0.0 if batch["padding"] else 1.0))
            optim.step()
            record(log, batch, loss)
            if batch["step"] % args.save_every == 0:
                name = f"step-{batch['step']}"
                fabric.save(os.path.join(args.ckpt, name + ".ckpt"), state)  # every rank: LoaderState gathers
                fabric.barrier()
                if fabric.global_rank == 0:  # the checkpoint is whole: point at it
                    point_latest(args.ckpt, name)


def main():
    train(arguments(__doc__, "checkpoint folder: step-<s>.ckpt per save, 'latest' names the last").parse_args())


if __name__ == "__main__":
    main()
