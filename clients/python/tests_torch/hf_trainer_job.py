"""A tiny Llama trained by Hugging Face Trainer on dataloaderd batches, run
under torchrun by test_trainer_hf.py: through LoaderTrainer (the adapter),
or, with --plain, the wiring the adapter replaces (an IterableDataset of the
loader's lines as Trainer's train_dataset), which must fail loudly.

Each rank writes one JSON line per batch it gives the trainer (step,
padding, tokens) to --records/rank-<r>-of-<W>.jsonl."""

import argparse
import json
import os
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from dataloaderd import Loader
from dataloaderd.trainers.hf import LoaderTrainer, hf_inputs


def tiny_llama(vocab, seq_len):
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=seq_len,
                                        attn_implementation="sdpa"))


def recorder(folder, hang_after):
    """hf_inputs, logging each batch; it stops (until killed) after step hang_after."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    log = open(os.path.join(folder, f"rank-{rank}-of-{world}.jsonl"), "a")

    def inputs(batch):
        if hang_after and batch["step"] > hang_after + 1:
            time.sleep(600)  # the test kills the job meanwhile
        tokens = [] if batch["padding"] else batch["tokens"].reshape(-1).tolist()
        log.write(json.dumps({"step": batch["step"], "padding": batch["padding"], "tokens": tokens}) + "\n")
        log.flush()
        return hf_inputs(batch)
    return inputs


class Lines(torch.utils.data.IterableDataset):
    """The wiring that drops data: the loader's lines as an IterableDataset."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        for batch in self.loader:
            for line in batch["input_ids"]:
                yield {"input_ids": line, "labels": line}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--out", required=True, help="Trainer's output_dir: checkpoint-<step>/ folders")
    p.add_argument("--records", required=True)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--hang-after", type=int, default=0, help="stop giving batches after this step (0: never)")
    p.add_argument("--resume", action="store_true", help="resume from the last checkpoint in --out")
    p.add_argument("--plain", action="store_true", help="Trainer(train_dataset=<the loader's lines>)")
    a = p.parse_args()
    with open(a.config) as f:
        config = json.load(f)
    args = TrainingArguments(output_dir=a.out, max_steps=200 if a.plain else 1000, save_strategy="steps",
                             save_steps=a.save_every, use_cpu=True, ddp_backend="gloo",  # CPU: gloo
                             ddp_find_unused_parameters=False, learning_rate=1e-3, seed=0, report_to=[],
                             logging_steps=1000, disable_tqdm=True)
    model = tiny_llama(a.vocab, config["seq_len"])
    if a.plain:
        Trainer(model=model, args=args, train_dataset=Lines(Loader(config, end="pad"))).train()
        return
    trainer = LoaderTrainer(model=model, args=args, loader_config=config,
                            inputs=recorder(a.records, a.hang_after))
    trainer.train(resume_from_checkpoint=True if a.resume else None)


if __name__ == "__main__":
    main()
