"""One rank of test_trainer_torchtitan.py's torchtitan job, under torchrun.

torchtitan's Trainer cannot run on a CPU (its attention has no CPU backward,
and it takes the device to be CUDA), so this rank builds what Trainer.__init__
builds, from a trainer config read by torchtitan's ConfigManager (this module
is also that config's ``--module``), with the same calls: the tokenizer, the
dataloader (the adapter), the optimizers, the lr schedulers, the loss and
the CheckpointManager; then runs Trainer.train()'s loop: load the latest
checkpoint, one batch a step (StopIteration is torchtitan's
DataloaderExhaustedError: the step is cancelled and training ends), a loss
and an optimizer step on a tiny model, CheckpointManager.save.

    titan_train.py --records DIR [--hang-at STEP] -- <torchtitan flags, e.g. --dataloader.job_config job.json>

Each step is a line of DIR/rank-<r>-of-<W>.jsonl: the step, the tokens the
batch carries (its inputs and each line's last label), padding, the loss.
"""

import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.stateful import Stateful
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.loss import IGNORE_INDEX, CrossEntropyLoss
from torchtitan.components.optimizer import default_adamw
from torchtitan.config import ConfigManager, TrainingConfig
from torchtitan.trainer import Trainer

from dataloaderd.trainers.torchtitan import DaemonTokenizer, DataloaderdDataLoader


def dataloaderd_cpu() -> Trainer.Config:
    """The trainer config, as a config_registry function (--module
    titan_train --config dataloaderd_cpu); the job config path comes on the
    command line (--dataloader.job_config)."""
    return Trainer.Config(
        hf_assets_path=".",  # no tokenizer files: DaemonTokenizer reads none
        tokenizer=DaemonTokenizer.Config(vocab_size=8192),
        dataloader=DataloaderdDataLoader.Config(),
        training=TrainingConfig(local_batch_size=4, seq_len=32, steps=1000),
        optimizer=default_adamw(lr=1e-3),
        loss=CrossEntropyLoss.Config(),
        checkpoint=CheckpointManager.Config(enable=True, folder="ckpt", interval=5, last_save_model_only=False),
    )


class TrainState(Stateful):
    """Trainer's own entry of the checkpoint ("train_state")."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, sd):
        self.step = sd["step"]


def build(config, rank, world):
    """What Trainer.__init__ builds, with its arguments (torchtitan/trainer.py)."""
    tokenizer = config.tokenizer.build(tokenizer_path=config.hf_assets_path)
    dataloader = config.dataloader.build(
        dp_world_size=world, dp_rank=rank, tokenizer=tokenizer, seq_len=config.training.seq_len,
        local_batch_size=config.training.local_batch_size, snapshot_every_n_steps=config.checkpoint.interval)
    torch.manual_seed(0)
    vocab = tokenizer.get_vocab_size()
    model = nn.Sequential(nn.Embedding(vocab, 16), nn.Linear(16, vocab))
    optimizers = config.optimizer.build(model_parts=[model])
    schedulers = config.lr_scheduler.build(optimizers=optimizers, training_steps=config.training.steps)
    state = TrainState()
    checkpointer = config.checkpoint.build(
        dataloader=dataloader, model_parts=[model], optimizers=optimizers, lr_schedulers=schedulers,
        states={"train_state": state}, sd_adapter=None, base_folder=config.dump_folder)
    loss_fn = config.loss.build(compile_config=config.compile)
    return dataloader, model, optimizers, schedulers, state, checkpointer, loss_fn


def carried(inputs, labels):
    """The tokens a batch carries: its inputs and each line's last label
    (the one token of a line that is no input), masked ones left out."""
    lines = torch.cat([inputs["input"], labels[:, -1:]], dim=1)
    return [t for t in lines.reshape(-1).tolist() if t != IGNORE_INDEX]


def check_labels(inputs, labels):
    """Each label is the next input, where it counts."""
    counts = labels[:, :-1] != IGNORE_INDEX
    assert torch.equal(labels[:, :-1][counts], inputs["input"][:, 1:][counts]), "a label is not the next token"
    assert inputs["positions"].shape == inputs["input"].shape


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", required=True)
    p.add_argument("--hang-at", type=int, default=0, help="after this step, wait to be killed")
    args, titan = p.parse_known_args()
    config = ConfigManager().parse_args(["--module", "titan_train", "--config", "dataloaderd_cpu"]
                                        + [a for a in titan if a != "--"])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataloader, model, optimizers, schedulers, state, checkpointer, loss_fn = build(config, rank, world)
    checkpointer.load(step=config.checkpoint.load_step)
    log = open(os.path.join(args.records, f"rank-{rank}-of-{world}.jsonl"), "a")
    data = iter(dataloader)
    while state.step < config.training.steps:
        state.step += 1
        try:
            inputs, labels = next(data)
        except StopIteration:  # Trainer.batch_generator: DataloaderExhaustedError, "last step was canceled"
            log.write(json.dumps({"step": state.step, "tokens": [], "exhausted": True}) + "\n")
            break
        check_labels(inputs, labels)
        valid = (labels != IGNORE_INDEX).sum()
        dist.all_reduce(valid)  # Trainer.train_step: the global valid tokens normalize the loss
        optimizers.zero_grad()
        loss, _ = loss_fn(model(inputs["input"]), labels, valid)
        loss.backward()
        optimizers.step()
        schedulers.step()
        assert math.isfinite(loss.item()), f"step {state.step}: loss {loss.item()}"
        log.write(json.dumps({"step": state.step, "tokens": carried(inputs, labels), "loss": loss.item(),
                              "padding": bool((labels == IGNORE_INDEX).all())}) + "\n")
        log.flush()
        if checkpointer.save(state.step, last_step=state.step == config.training.steps):
            dist.barrier()
            if rank == 0:  # every rank's part is written: point at it (torchrun_job.kill_after_checkpoint)
                latest = os.path.join(config.dump_folder, config.checkpoint.folder, "latest")
                with open(latest + ".tmp", "w") as f:
                    f.write(f"step-{state.step}")
                os.replace(latest + ".tmp", latest)
        if state.step == args.hang_at:
            time.sleep(600)
    log.close()
    checkpointer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
