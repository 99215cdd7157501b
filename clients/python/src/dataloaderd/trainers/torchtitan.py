"""torchtitan's dataloader served by dataloaderd (docs/trainers.md, "torchtitan").

A torchtitan trainer config (torchtitan 0.3.0: a ``config_registry``
function returning ``Trainer.Config``) names it as its dataloader, and the
tokenizer stand-in (the daemon serves token ids) as its tokenizer::

    dataloader=DataloaderdDataLoader.Config(job_config="job.yaml"),
    tokenizer=DaemonTokenizer.Config(vocab_size=...),

The trainer builds it as it builds its own (``config.dataloader.build(
dp_world_size=..., dp_rank=..., seq_len=..., local_batch_size=..., ...)``)
and checkpoints it as its own: CheckpointManager saves the dataloader's
state_dict with torch.distributed.checkpoint, here the Loader's, split by
shard, so a resume on another data-parallel degree reads every token once.

What it yields is what torchtitan's own text dataloader yields:
``({"input": input_ids, "positions": position_ids}, labels)``, labels the
next tokens with IGNORE_INDEX where the daemon's ``loss_mask`` is 0 (padding,
and with ``mask_document_boundaries`` a document's last token). The batches
end on every rank at the same step (``end="pad"``): see DataloaderdDataLoader.

Importing this module imports torchtitan (its classes are the bases);
``import dataloaderd`` does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, Literal, Optional, Tuple

try:
    import torch
    import torch.distributed as dist
    from torchtitan.components.dataloader import BaseDataLoader
    from torchtitan.components.loss import IGNORE_INDEX
    from torchtitan.components.tokenizer import BaseTokenizer
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"dataloaderd.trainers.torchtitan needs torchtitan (tested with 0.3.0) and torch: {e}") from e

from ..batch import Batch, all_padding
from ..config import load_config, to_proto
from ..errors import ConfigError
from ..loader import Loader

if TYPE_CHECKING:
    from .._options import Transport

__all__ = ["DataloaderdDataLoader", "DaemonTokenizer", "titan_batch"]

# The job config's metadata torchtitan needs: positions (its attention finds
# documents where they restart at 0, and RoPE reads them) and the loss mask.
NEEDED_METADATA = ("position_ids", "loss_mask")


def titan_batch(batch: Batch, lines: int = 0, pad_id: int = 0) -> Tuple[Dict[str, Any], Any]:
    """A Loader batch as torchtitan's trainer takes it: ``({"input":
    input_ids, "positions": position_ids}, labels)``, labels the next tokens
    (``shift_labels``) with IGNORE_INDEX where ``loss_mask`` is 0. Every
    tensor is int64 and of memory of its own (none views the ring: torchtitan
    fetches a step's microbatches before it uses them). A batch of fewer than
    ``lines`` lines (a bounded run's last) gets lines of padding (pad_id,
    position 0, IGNORE_INDEX): torchtitan's CUDA graphs take one shape."""
    inputs, positions = batch["input_ids"], batch["position_ids"]
    labels = batch["shift_labels"].masked_fill(~batch["loss_mask"], IGNORE_INDEX)
    short = lines - inputs.shape[0]
    if short > 0:
        rows = (short, inputs.shape[1])
        inputs = torch.cat([inputs, inputs.new_full(rows, pad_id)])
        positions = torch.cat([positions, positions.new_zeros(rows)])
        labels = torch.cat([labels, labels.new_full(rows, IGNORE_INDEX)])
    return {"input": inputs, "positions": positions}, labels


class DataloaderdDataLoader(BaseDataLoader):  # type: ignore[misc]  # torchtitan is untyped here
    """One data-parallel rank's batches from the node's dataloaderd daemon.

    ``end="pad"`` (the default): after a rank's last batch it yields padding
    (labels all IGNORE_INDEX: no loss, no gradient, every collective still
    joined) until every rank pads; then, at the first batch of a trainer
    step, iteration ends on every rank at once, which torchtitan's trainer
    reads as the end of the data (DataloaderExhaustedError: "Ran out of
    data") at the same step everywhere. Deciding it is one all-reduce of one
    integer per trainer step, on a gloo group of its own (no device sync).
    ``end="stop"`` is refused with more than one data-parallel rank: the rank
    whose data ends first would leave the training loop alone and the others
    would wait for it in their next collective, forever.

    Processes with the same dp_rank (tensor, pipeline or context parallel
    peers) share one session (Loader's ``consumers``) and read the same
    batches.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):  # type: ignore[misc]
        job_config: str = ""
        """The dataloaderd job config (YAML or JSON, as Loader takes it). Its
        seq_len and batch_size must be torchtitan's training.seq_len and
        local batch size; its metadata must hold position_ids and loss_mask."""

        job: Optional[str] = None
        """The job's name in the daemon's metrics (Loader's job=)."""

        socket: Optional[str] = None
        """The daemon's socket; DATALOADERD_SOCKET by default."""

        end: Literal["pad", "stop"] = "pad"
        """How a bounded run ends: "pad" ends every rank at the same step."""

        transport: Literal["shm", "inline", "shm-pinned", "cuda"] = "shm"
        """How batches reach the process (Loader's transport=)."""

        batches_per_step: int = 1
        """Batches one trainer step takes: gradient accumulation steps times
        pipeline microbatches. The data ends only at a step's first batch, so
        no step that holds data is cancelled."""

        batch_timeout: float = 600.0
        """Seconds to wait for a batch before failing the step."""

    def __init__(self, config: Config, *, dp_world_size: int, dp_rank: int, seq_len: int,
                 local_batch_size: int, **kwargs: Any):
        # kwargs: what torchtitan also passes (tokenizer, snapshot_every_n_steps): not needed here.
        self._lines, self._pad_id = local_batch_size, check_job(config.job_config, seq_len, local_batch_size)
        if config.end not in ("pad", "stop"):
            raise ConfigError(f"dataloader.end {config.end!r}: want 'pad' or 'stop'")
        if config.end == "stop" and dp_world_size > 1:
            raise ConfigError(
                f"dataloader.end='stop' with {dp_world_size} data-parallel ranks: the rank whose data ends first "
                "would leave torchtitan's training loop (DataloaderExhaustedError) while the others wait for it in "
                "their next collective; use end='pad' (the default), which ends every rank at the same step")
        if config.batches_per_step < 1:
            raise ConfigError(f"dataloader.batches_per_step must be >= 1, got {config.batches_per_step}")
        self.dp_rank, self.dp_world_size = dp_rank, dp_world_size
        self._per_step = config.batches_per_step
        self._pad = config.end == "pad"
        self._group = _padding_group() if self._pad else None
        transport: Transport = config.transport
        self.loader = Loader(config.job_config, dp_rank=dp_rank, dp_size=dp_world_size, socket=config.socket,
                             transport=transport, job=config.job, consumers=_consumers(dp_world_size),
                             batch_timeout=config.batch_timeout, dtype="int64", end=config.end)

    def __iter__(self) -> Iterator[Tuple[Dict[str, Any], Any]]:
        for batch in self.loader:
            if self._pad and (batch["step"] - 1) % self._per_step == 0 and self._all_padding(batch):
                return  # every rank is past its data, at a step's first batch: the data ends here, everywhere
            yield titan_batch(batch, self._lines, self._pad_id)

    def _all_padding(self, batch: Batch) -> bool:
        if not (dist.is_available() and dist.is_initialized()):
            return batch["padding"]
        return all_padding(batch, self._group)

    def state_dict(self) -> Dict[str, Any]:
        """The Loader's state after the last batch yielded, split by shard:
        CheckpointManager's DCP save keeps each shard's cursor once, and its
        load gives each rank the shards it owns on any dp degree."""
        return self.loader.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.loader.load_state_dict(state_dict)

    def close(self) -> None:
        self.loader.close()


class DaemonTokenizer(BaseTokenizer):  # type: ignore[misc]
    """torchtitan's tokenizer slot when the daemon serves token ids: it
    reads no file (torchtitan's default loads one from hf_assets_path) and
    only says the vocabulary size; encode and decode raise."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):  # type: ignore[misc]
        vocab_size: int = 0
        """The model's vocabulary size (largest token id + 1, or more)."""

    def __init__(self, config: Config, **kwargs: Any):  # kwargs: tokenizer_path, unused
        super().__init__()
        self.vocab_size = config.vocab_size

    def encode(self, *args: Any, **kwargs: Any) -> list[int]:
        raise NotImplementedError("DaemonTokenizer does not tokenize: dataloaderd serves token ids "
                                  "(a dataset's tokenizer is set in the job config)")

    def decode(self, *args: Any, **kwargs: Any) -> str:
        raise NotImplementedError("DaemonTokenizer does not decode: it holds no vocabulary, only its size")

    def get_vocab_size(self) -> int:
        return self.vocab_size


def check_job(path: str, seq_len: int, local_batch_size: int) -> int:
    """Raises ConfigError unless the job config at path gives batches of
    torchtitan's shape and the metadata it needs; returns its pad_id."""
    if not path:
        raise ConfigError("dataloader.job_config is empty: name the dataloaderd job config (YAML or JSON)")
    data, base = load_config(path)
    job = to_proto(data, base)
    if job.seq_len != seq_len or job.batch_size != local_batch_size:
        raise ConfigError(
            f"job config {path}: seq_len {job.seq_len} and batch_size {job.batch_size}, but torchtitan's "
            f"training.seq_len is {seq_len} and its batch per rank (local_batch_size, or the pipeline "
            f"microbatch size) {local_batch_size}: make them equal")
    missing = [m for m in NEEDED_METADATA if m not in job.metadata]
    if missing:
        raise ConfigError(f"job config {path}: metadata lacks {', '.join(missing)}: torchtitan's model takes "
                          "positions and its loss the mask (add them to the config's metadata list)")
    if job.positions == "continue":
        raise ConfigError(f"job config {path}: positions: continue, but torchtitan finds a document's start "
                          "where its positions restart at 0: use positions: restart (the default)")
    return int(job.pad_id)


def _consumers(dp_world_size: int) -> int:
    """Processes that read each dp rank's batches: the world over dp."""
    if dist.is_available() and dist.is_initialized():
        return max(1, int(dist.get_world_size()) // dp_world_size)
    return 1


def _padding_group() -> Any:
    """The group of the end-of-data all-reduce: the default one when it is
    gloo, else a gloo group over the same ranks (a CPU integer: no device
    sync). Built by every rank, as torchtitan builds the dataloader."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_backend() == "gloo":
        return None
    return dist.new_group(backend="gloo")
