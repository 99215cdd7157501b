"""The Hugging Face Trainer adapter (dataloaderd.trainers.hf) with the real
transformers and accelerate: a tiny Llama trained by Trainer under torchrun
(gloo, CPU), killed with kill -9 after a checkpoint and resumed from it on
another number of ranks, every token of the corpus exactly once; the wiring
that drops ranks' data failing loudly; the mixture changed from a callback;
and the probe of models that let packed documents attend to each other."""

import json
import os
import sys
import warnings

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from accelerate.data_loader import IterableDatasetShard

from dataloaderd import AttentionLeakError, Loader, ShardingError
from dataloaderd.trainers.hf import LoaderTrainer, WeightsSchedule, check_packed_attention, hf_inputs
from hf_trainer_job import Lines, tiny_llama
from rundaemon import Daemon
from torchrun_job import check_exactly_once, finish, kill_after_checkpoint, make_job, start

JOB = os.path.join(os.path.dirname(__file__), "hf_trainer_job.py")


@pytest.fixture
def job(tmp_path):
    return make_job(tmp_path)


def hf_job(job):
    """The job's config with the metadata the adapter maps (position_ids, loss_mask)."""
    config = json.loads(open(job["config"]).read())
    config["metadata"] = ["position_ids", "loss_mask"]
    path = job["tmp"] / "job-hf.json"
    path.write_text(json.dumps(config))
    return str(path)


def launch(job, name, nproc, *extra):
    argv = [JOB, "--config", hf_job(job), "--vocab", str(job["vocab"]), "--out", str(job["tmp"] / "out"),
            "--records", str(job["tmp"] / f"log-{name}"), *extra]
    return start(job, name, nproc, argv)


def last_checkpoint(job):
    """The step of the last checkpoint Trainer finished (its trainer_state.json
    comes after every rank's loader file), 0 for none."""
    out = job["tmp"] / "out"
    steps = [int(d.name.split("-")[1]) for d in out.glob("checkpoint-*") if (d / "trainer_state.json").exists()] \
        if out.exists() else []
    return max(steps, default=0)


def test_trainer_killed_resumes_on_three_ranks_exactly_once(job):
    first = launch(job, "a", 2, "--hang-after", "10")
    saved = kill_after_checkpoint(job, "a", first, 10, lambda: last_checkpoint(job))
    assert saved == 10
    for rank in range(2):
        assert (job["tmp"] / "out" / "checkpoint-10" / "dataloader" / f"rank-{rank}-of-2.json").exists()
    resumed = launch(job, "b", 3, "--resume")
    finish(job, "b", resumed)
    # Every rank of the resumed run gave the trainer batches, from the step
    # after the checkpoint (Trainer skipped or replayed none), and every
    # token of the corpus was trained on once.
    check_exactly_once(job, "a", 2, "b", 3, saved)


def test_plain_trainer_with_the_loader_as_train_dataset_fails_loudly(job):
    proc = launch(job, "p", 2, "--plain")
    code = proc.wait(timeout=300)
    out = (job["tmp"] / "p.out").read_text()
    assert code != 0, out[-3000:]
    assert "ShardingError" in out and "DataLoaderDispatcher" in out, out[-3000:]


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


def test_weights_schedule_changes_the_mixture_from_a_callback(job, daemon):
    config = json.loads(open(job["config"]).read())
    config.update(epochs=0, metadata=["dataset_ids"])
    seen = {}

    def inputs(batch):
        seen[batch["step"]] = set(batch["dataset_ids"].tolist())
        return hf_inputs(batch)
    args = TrainingArguments(output_dir=str(job["tmp"] / "w"), max_steps=8, save_strategy="no", use_cpu=True,
                             report_to=[], disable_tqdm=True)
    trainer = LoaderTrainer(model=tiny_llama(job["vocab"], config["seq_len"]), args=args, loader_config=config,
                            loader_options={"dp_rank": 0, "dp_size": 1, "socket": daemon.socket}, inputs=inputs,
                            callbacks=[WeightsSchedule({3: {"d0": 1.0, "d1": 0.0}})])
    trainer.train()
    trainer.loader.close()
    assert sorted(seen) == list(range(1, 9))
    assert set().union(*(seen[s] for s in range(1, 4))) == {0, 1}, "both datasets before the change"
    assert set().union(*(seen[s] for s in range(4, 9))) == {0}, "d1 after its weight went to 0 at step 4"


def test_hf_inputs_mask_what_loss_mask_leaves_out(job, daemon):
    config = json.loads(open(job["config"]).read())
    config.update(metadata=["position_ids", "loss_mask"], mask_document_boundaries=True)
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket) as loader:
        batch = next(iter(loader))
        inputs = hf_inputs(batch)
        keep = batch["loss_mask"]
        assert not keep.all(), "the batch has no boundary to mask"
        assert torch.equal(inputs["shift_labels"], batch["shift_labels"].masked_fill(~keep, -100))
        assert torch.equal(inputs["labels"][:, 1:], batch["labels"][:, 1:].masked_fill(~keep[:, :-1], -100))
        assert torch.equal(inputs["position_ids"], batch["position_ids"]) and inputs["use_cache"] is False
        padding = hf_inputs({**batch, "padding": True})
        assert (padding["labels"] == -100).all() and (padding["shift_labels"] == -100).all()


@pytest.mark.parametrize("processes", [2, 1])
def test_iterable_dataset_shard_raises_only_when_it_would_drop_data(job, daemon, processes):
    config = json.loads(open(job["config"]).read())
    with Loader(config, dp_rank=0, dp_size=2, socket=daemon.socket) as loader:
        shard = IterableDatasetShard(Lines(loader), batch_size=1, num_processes=processes, process_index=0)
        if processes == 1:
            assert next(iter(shard))["input_ids"].shape == (config["seq_len"],)
        else:
            with pytest.raises(ShardingError, match="IterableDatasetShard"):
                next(iter(shard))


def tiny_model(kind):
    if kind == "gpt2":
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    model = tiny_llama(64, 32)
    model.config._attn_implementation = kind.split("-")[1]
    return model


@pytest.mark.parametrize("kind", ["llama-sdpa", "llama-eager", "gpt2"])
def test_packed_attention_leaks_with_the_default_cache_and_not_without(kind):
    model = tiny_model(kind).train()
    assert check_packed_attention(model, use_cache=False) < 1e-5
    assert model.training, "the probe left the model in eval mode"
    with pytest.raises(AttentionLeakError, match="use_cache=False"):
        check_packed_attention(model)  # use_cache defaults to the config's True
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        moved = check_packed_attention(model, on_leak="warn")
    assert moved > 1e-2 and any(issubclass(w.category, RuntimeWarning) for w in got)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
