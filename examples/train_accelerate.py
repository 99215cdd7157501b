"""examples/train_gpt.py's loop under Hugging Face accelerate (DDP, CPU): the
loader iterated as it is (never through accelerator.prepare), saved and
restored with accelerator.save_state/load_state through
dataloaderd.trainers.accelerate.checkpoint_loader: every rank writes its own
cursors into the state folder, and a resume on any number of ranks gets them
back (torch.distributed.checkpoint reshards them).

    deploy/torchrun-with-dataloaderd.sh --standalone --nproc-per-node 2 examples/train_accelerate.py \\
        --config job.json --vocab 4000 --ckpt /tmp/ckpt --save-every 5 --records /tmp/records [--resume]

tests_torch/test_trainer_accelerate.py runs it: kill -9, a resume on 3
ranks, every token exactly once.
"""

import json
import os

import torch
import torch.nn.functional as F
from accelerate import Accelerator

from dataloaderd import Loader, all_padding
from dataloaderd.trainers.accelerate import checkpoint_loader
from train_gpt import TinyGPT, arguments, point_latest, record


def train(args):
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    with open(args.config) as f:
        config = json.load(f)
    model = TinyGPT(args.vocab, config["seq_len"])
    model, optim = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    latest = os.path.join(args.ckpt, "latest")
    rank, world = accelerator.process_index, accelerator.num_processes
    log = open(os.path.join(args.records, f"rank-{rank}-of-{world}.jsonl"), "a")
    with Loader(config, end="pad") as loader:  # each rank's own stream: not through accelerator.prepare
        checkpoint_loader(accelerator, loader)
        if args.resume and os.path.exists(latest):
            with open(latest) as f:
                accelerator.load_state(os.path.join(args.ckpt, f.read().strip()))
        for batch in loader:
            if all_padding(batch):
                break  # every rank is past its data: the epoch is over, at the same step everywhere
            logits = model(batch["input_ids"])
            loss = F.cross_entropy(logits.flatten(0, 1), batch["shift_labels"].flatten())
            optim.zero_grad()
            accelerator.backward(loss * (0.0 if batch["padding"] else 1.0))
            optim.step()
            record(log, batch, loss)
            if batch["step"] % args.save_every == 0:
                name = f"step-{batch['step']}"
                accelerator.save_state(os.path.join(args.ckpt, name))  # on every process
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:  # the checkpoint is whole: point at it
                    point_latest(args.ckpt, name)
    accelerator.end_training()


def main():
    train(arguments(__doc__, "checkpoint folder: step-<s>/ per save, 'latest' names the last").parse_args())


if __name__ == "__main__":
    main()
