"""The Hugging Face ``Trainer`` adapter (docs/trainers.md, "Hugging Face
Trainer"): :class:`LoaderTrainer` opens a Loader on every rank, gives the
trainer its batches as the model's keyword arguments (:func:`hf_inputs`),
saves the loader's state into each checkpoint's folder and resumes it from
there, and ends a bounded run on every rank at the same step;
:class:`WeightsSchedule` changes the mixture from a callback;
:func:`check_packed_attention` finds a model that lets packed documents
attend to each other.

Importing this module imports torch and transformers (the rest of the client
needs neither)."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Mapping, Optional, Union

try:
    import torch
    import torch.distributed as dist
    from transformers import Trainer, TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(f"dataloaderd.trainers.hf needs torch and transformers ({err}): "
                      "pip install transformers") from err

from ..batch import Batch
from ..errors import ConfigError
from ..loader import Loader
from ._attention import Leak, check_packed_attention

__all__ = ["LoaderTrainer", "WeightsSchedule", "hf_inputs", "check_packed_attention"]

log = logging.getLogger(__name__)

IGNORE = -100  # the label Hugging Face losses skip

# The key under which the batches LoaderTrainer's train dataloader yields say
# they are padding (end="pad"); compute_loss takes it out before the model.
PADDING = "dataloaderd_padding"


def hf_inputs(batch: Batch) -> Dict[str, Any]:
    """A batch as a Hugging Face causal LM's keyword arguments: ``input_ids``;
    ``labels`` and ``shift_labels`` (every position predicted, the last one
    included: the model uses ``shift_labels`` when given), -100 where the
    batch's ``loss_mask`` (metadata) is False and everywhere in a padding
    batch; ``position_ids`` when the metadata has them; ``use_cache=False``
    (with a cache, transformers' masks ignore the documents that
    ``position_ids`` mark: docs/metadata.md). Each tensor is int64 and of its
    own memory, so it stays valid after the next batch is taken."""
    labels, shift = batch["labels"].long(), batch["shift_labels"].long()
    if batch["padding"]:
        labels, shift = torch.full_like(labels, IGNORE), torch.full_like(shift, IGNORE)
    elif "loss_mask" in batch:
        keep = batch["loss_mask"]
        shift = shift.masked_fill(~keep, IGNORE)
        # labels[k + 1] is the target of input k, as loss_mask[k] says
        labels = torch.cat([labels[:, :1], labels[:, 1:].masked_fill(~keep[:, :-1], IGNORE)], dim=1)
    out: Dict[str, Any] = {"input_ids": batch["input_ids"].long(), "labels": labels, "shift_labels": shift,
                           "use_cache": False}
    if "position_ids" in batch:
        out["position_ids"] = batch["position_ids"].long()
    return out


def _all_padding(batch: Batch) -> bool:
    """Whether every rank got a padding batch (one all-reduce when distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return bool(batch["padding"])
    from ..batch import all_padding
    return all_padding(batch)


class _Batches:
    """What LoaderTrainer's get_train_dataloader gives Trainer: the loader's
    batches as the model's inputs, one pass for the whole run (Trainer's
    "epochs" of an unsized loader are max_steps long). At the start of each
    accumulation group it asks every rank whether they all pad; when they
    do it stops training there, on every rank at the same step."""

    def __init__(self, trainer: "LoaderTrainer", loader: Loader):
        self.trainer, self.loader = trainer, loader
        self._batches: Optional[Any] = None
        self._taken = 0
        self._checked = False

    def __iter__(self) -> Any:
        if self._batches is None:
            self._batches = iter(self.loader)
        group = max(1, int(self.trainer.args.gradient_accumulation_steps))
        for batch in self._batches:
            if self._taken % group == 0 and _all_padding(batch):
                self.trainer.control.should_training_stop = True
                return
            self._taken += 1
            inputs = self.trainer.inputs(batch)
            if not self._checked:
                self._checked = True
                self.trainer.check_attention(inputs)
            inputs[PADDING] = bool(batch["padding"])
            yield inputs


class LoaderTrainer(Trainer):  # type: ignore[misc]  # transformers is not typed here (mypy.ini)
    """A ``transformers.Trainer`` that trains on dataloaderd batches.

    ``loader_config`` is the job config (a dict or a file, as ``Loader``
    takes it); ``loader_options`` the Loader's other arguments (``dp_rank``,
    ``socket``, ``transport``, ...: torchrun's environment by default), but
    ``resume_from`` (``train(resume_from_checkpoint=...)`` gives it) and
    ``end``, which is ``"pad"``. ``inputs`` maps a batch to the model's
    keyword arguments (:func:`hf_inputs`). ``packed_attention``: what to do
    when the batches carry ``position_ids`` and the model lets a document
    attend to the one before it: ``"raise"`` (AttentionLeakError),
    ``"warn"`` or ``"ignore"``. Pass no ``train_dataset``; ``max_steps`` must
    be set (the loader has no length).

    ``train()`` opens the Loader (``self.loader``), resuming from the
    checkpoint it resumes from. Each rank reads its own stream, never
    through accelerate's dispatcher. Each checkpoint ``checkpoint-<step>/``
    gets every rank's ``dataloader/rank-<r>-of-<W>.json`` (written, then a
    barrier, before Trainer writes the rest), and a resume, on any number of
    ranks, goes on with the batch after it: Trainer's own skipping of data
    is turned off (``args.ignore_data_skip = True``). A bounded run
    (``epochs`` > 0) pads the ranks that are done with batches whose loss is
    0 until every rank is, then stops every rank at the same step."""

    def __init__(self, *args: Any, loader_config: Any, loader_options: Optional[Mapping[str, Any]] = None,
                 inputs: Callable[[Batch], Dict[str, Any]] = hf_inputs, packed_attention: Leak = "raise",
                 **kwargs: Any):
        if kwargs.get("train_dataset") is not None:
            raise ConfigError("LoaderTrainer reads its batches from the loader: pass loader_config, not train_dataset")
        options = dict(loader_options or {})
        if options.get("end", "pad") != "pad":
            raise ConfigError(f"LoaderTrainer needs end='pad' (got end={options['end']!r}): with 'stop' the ranks "
                              "of a bounded run end at different steps and the others wait in DDP's all-reduce")
        if "resume_from" in options:
            raise ConfigError("LoaderTrainer resumes the loader from the checkpoint train(resume_from_checkpoint=...) "
                              "resumes from: pass no resume_from in loader_options")
        if packed_attention not in ("raise", "warn", "ignore"):
            raise ConfigError(f"packed_attention={packed_attention!r}: 'raise', 'warn' or 'ignore'")
        super().__init__(*args, **kwargs)
        self.loader_config, self.loader_options = loader_config, {**options, "end": "pad"}
        self.inputs, self.packed_attention = inputs, packed_attention
        self.loader: Optional[Loader] = None
        if not self.args.ignore_data_skip:
            log.info("LoaderTrainer: ignore_data_skip set to True (the loader resumes where it was; a skip would "
                     "drop the batches after the checkpoint)")
            self.args.ignore_data_skip = True

    def train(self, resume_from_checkpoint: Union[str, bool, None] = None, *args: Any, **kwargs: Any) -> Any:
        """Trainer.train, with the Loader opened first (from the checkpoint
        resumed from: True means the last one in ``args.output_dir``)."""
        folder = _checkpoint_folder(resume_from_checkpoint, self.args.output_dir)
        if self.loader is not None:
            self.loader.close()
        self.loader = Loader(self.loader_config, resume_from=folder, **self.loader_options)
        return super().train(folder, *args, **kwargs)

    def get_train_dataloader(self) -> Any:
        if self.loader is None:
            raise ConfigError("LoaderTrainer opens its loader in train(): call train()")
        return _Batches(self, self.loader)

    def check_attention(self, inputs: Mapping[str, Any]) -> None:
        """Once, before the first batch: when the batches carry position_ids,
        the probe of check_packed_attention on the model (every rank runs it)."""
        if "position_ids" in inputs and self.packed_attention != "ignore":
            forward = {k: inputs[k] for k in ("use_cache",) if k in inputs}
            check_packed_attention(self.model, on_leak=self.packed_attention, **forward)

    def compute_loss(self, model: Any, inputs: Dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """Trainer's loss; for a padding batch (end="pad") a loss of 0 that
        still runs the model, so DDP's all-reduce sees every parameter."""
        if not inputs.pop(PADDING, False):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        outputs = model(**{k: v for k, v in inputs.items() if k not in ("labels", "shift_labels")})
        loss = outputs.logits.float().sum() * 0.0
        return (loss, outputs) if return_outputs else loss

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        # Trainer's folder for this checkpoint (Trainer._save_checkpoint);
        # every rank's loader file is there before rank 0 writes
        # trainer_state.json, so a checkpoint with one has the loader's.
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        assert self.loader is not None, "a checkpoint is saved in train()"
        os.makedirs(folder, exist_ok=True)
        self.loader.save(folder)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
        super()._save_checkpoint(model, trial)


def _checkpoint_folder(resume: Union[str, bool, None], output_dir: Optional[str]) -> Optional[str]:
    """The folder Trainer.train resumes from, as it finds it."""
    if resume is None or resume is False:
        return None
    if resume is True:
        found = get_last_checkpoint(output_dir) if output_dir and os.path.isdir(output_dir) else None
        if found is None:
            raise ConfigError(f"resume_from_checkpoint=True, but there is no checkpoint-<step> folder in {output_dir}")
        return str(found)
    return os.fspath(resume)


class WeightsSchedule(TrainerCallback):  # type: ignore[misc]  # transformers is not typed here (mypy.ini)
    """Changes the mixture at given optimizer steps: ``{step: {dataset:
    weight}}``; the weights of step ``s`` apply from the batch after step
    ``s``. Every rank runs callbacks, so every rank calls the loader's
    ``set_weights`` at the same step, as it must. The change is in the
    loader's state, so a resume after ``s`` keeps it."""

    def __init__(self, changes: Mapping[int, Mapping[str, float]]):
        self.changes = {int(s): dict(w) for s, w in changes.items()}

    def on_step_end(self, args: Any, state: Any, control: Any, train_dataloader: Any = None,
                    **kwargs: Any) -> None:
        weights = self.changes.get(state.global_step)
        if weights is None:
            return
        loader = getattr(train_dataloader, "loader", None)
        if not isinstance(loader, Loader):
            raise ConfigError("WeightsSchedule works with LoaderTrainer (its train dataloader holds the loader)")
        loader.set_weights(weights)
