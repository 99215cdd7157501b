"""examples/train_gpt.py's tiny GPT under Lightning's Trainer (DDP, CPU),
fed by dataloaderd.trainers.lightning.LoaderDataModule: each rank reads its
own stream, every checkpoint holds every rank's cursors, a resume on any
number of ranks goes on after the last trained step, and the epoch ends on
every rank at the same step. A callback changes the mixture at --mix-at.

    deploy/torchrun-with-dataloaderd.sh --standalone --nproc-per-node 2 examples/train_lightning.py \\
        --config job.json --vocab 4000 --ckpt /tmp/ckpt --save-every 5 --records /tmp/records [--resume]

tests_torch/test_trainer_lightning.py runs it: kill -9, a resume on 3 ranks,
every token exactly once.
"""

import json
import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback

from dataloaderd.trainers.lightning import LoaderDataModule
from train_gpt import TinyGPT, arguments, point_latest, record


class LitGPT(pl.LightningModule):
    def __init__(self, vocab, seq_len, log):
        super().__init__()
        self.model, self.log_file = TinyGPT(vocab, seq_len), log

    def training_step(self, batch, batch_idx):
        logits = self.model(batch["input_ids"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["shift_labels"].flatten())
        record(self.log_file, batch, loss, global_step=self.global_step)
        return loss * (0.0 if batch["padding"] else 1.0)  # a padding step still joins DDP's all-reduce

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Mixture(Callback):
    """Changes the mixture on every rank at the same step: from a callback."""

    def __init__(self, at):
        self.at = at

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch["step"] == self.at:
            trainer.datamodule.set_weights({"d0": 1.0, "d1": 3.0})


class Checkpoint(Callback):
    """trainer.save_checkpoint every n steps (on every rank: the datamodule's
    state gathers every rank's cursors; rank 0 writes), then <ckpt>/latest."""

    def __init__(self, folder, every):
        self.folder, self.every = folder, every

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch["step"] % self.every == 0:
            name = f"step-{batch['step']}"
            trainer.save_checkpoint(os.path.join(self.folder, name + ".ckpt"))  # ends with a barrier
            if trainer.is_global_zero:
                point_latest(self.folder, name)


def train(args):
    torch.manual_seed(0)
    with open(args.config) as f:
        config = json.load(f)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    log = open(os.path.join(args.records, f"rank-{rank}-of-{world}.jsonl"), "a")
    data = LoaderDataModule(config)  # end="pad", copy=True; dp_rank/dp_size: the trainer's rank and world size
    trainer = pl.Trainer(accelerator="cpu", strategy="ddp", devices=int(os.environ["LOCAL_WORLD_SIZE"]), num_nodes=1,
                         max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Mixture(args.mix_at), Checkpoint(args.ckpt, args.save_every)])
    ckpt = None
    latest = os.path.join(args.ckpt, "latest")
    if args.resume and os.path.exists(latest):
        with open(latest) as f:
            ckpt = os.path.join(args.ckpt, f.read().strip() + ".ckpt")
    trainer.fit(LitGPT(args.vocab, config["seq_len"], log), datamodule=data, ckpt_path=ckpt)


def main():
    p = arguments(__doc__, "checkpoint folder: step-<s>.ckpt per save, 'latest' names the last")
    p.add_argument("--mix-at", type=int, default=3, help="the step after which the mixture changes")
    train(p.parse_args())


if __name__ == "__main__":
    main()
