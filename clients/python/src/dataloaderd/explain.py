"""Which documents made a step's batches: ``dataloaderd explain`` from
Python, through the daemon binary (no daemon runs: the binary opens the
corpus and the checkpoint itself, as a session resuming from it would)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .config import load_config, to_proto
from .errors import ConfigError, DataloaderdError

__all__ = ["explain", "find_binary"]


def find_binary() -> str:
    """The dataloaderd binary: $DATALOADERD_BIN, else ``dataloaderd`` on
    the PATH."""
    path = os.environ.get("DATALOADERD_BIN") or shutil.which("dataloaderd")
    if not path:
        raise DataloaderdError("dataloaderd.explain runs the dataloaderd binary: set DATALOADERD_BIN to its path, "
                               "or put it on the PATH")
    return path


def explain(config: Union[str, "os.PathLike[str]", Mapping[str, object]], step: Optional[int] = None, *,
            steps: Optional[Tuple[int, int]] = None, batch_id: Optional[str] = None,
            checkpoint: Optional[Union[str, "os.PathLike[str]"]] = None, prefix: Optional[str] = None,
            dp_rank: Optional[int] = None,
            dp_size: Optional[int] = None, tokenizer_dirs: Sequence[str] = (), binary: Optional[str] = None,
            timeout: Optional[float] = None) -> List[Dict[str, Any]]:
    """The pieces of the lines of a step's batches, one dict a piece, as
    ``dataloaderd explain --json`` gives them (docs/explain.md): ``batch_id``,
    ``step``, ``dp_rank``, ``line``, ``column_start``/``column_end`` (where
    it sits in the line), ``dataset``, ``shard``, ``unit``, ``file``,
    ``file_unit``, ``document`` (-1 where a unit holds several documents),
    ``unit_document``, ``token_start``/``token_end`` (the document's tokens
    it took) and ``bos``/``eos``.

    Give one of ``step`` (an int, from 1), ``steps`` (first, last) and
    ``batch_id`` (a batch's ``batch["batch_id"]``: its rank and step, and a
    fingerprint that must be the config's). ``dp_size`` is the job's world
    (required without ``batch_id``); ``dp_rank`` one rank (default: every
    rank). ``checkpoint`` is a folder ``loader.save`` wrote into, or a
    torch.distributed.checkpoint folder holding a Loader's state dict
    (under ``prefix``, default the only one): the ranks start from it as a
    resume from it would (default: the run's start).
    ``tokenizer_dirs`` are the daemon's ``--tokenizer-dir`` folders, for
    text datasets. A step of a skipped range (the config's ``skip_steps``,
    the checkpoint's log) has no pieces: its batches were made and dropped
    (the binary's ``--json`` lists them under each rank's ``skipped``)."""
    given = [x for x in (step, steps, batch_id) if x is not None]
    if len(given) != 1:
        raise ConfigError("explain: give one of step, steps and batch_id")
    data, base = load_config(config)
    msg = to_proto(data, base)  # checks the config; paths made absolute
    args = [binary or find_binary(), "explain", "--json"]
    if step is not None:
        args += ["--step", str(int(step))]
    elif steps is not None:
        args += ["--steps", f"{int(steps[0])}-{int(steps[1])}"]
    else:
        args += ["--batch-id", str(batch_id)]
    if dp_size is not None:
        args += ["--ranks", str(int(dp_size))]
    if dp_rank is not None:
        args += ["--rank", str(int(dp_rank))]
    if checkpoint is not None:
        args += ["--from", os.path.abspath(os.fspath(checkpoint))]
    if prefix is not None:
        args += ["--prefix", prefix]
    for d in tokenizer_dirs:
        args += ["--tokenizer-dir", os.fspath(d)]
    with tempfile.TemporaryDirectory(prefix="dataloaderd-explain-") as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_config_json(msg), f)
        done = subprocess.run(args + [path], capture_output=True, text=True, timeout=timeout)
    if done.returncode == 2:
        raise ConfigError(f"dataloaderd explain: {done.stderr.strip().splitlines()[0] if done.stderr else 'bad arguments'}")
    if done.returncode != 0:
        raise DataloaderdError(done.stderr.strip() or f"dataloaderd explain exited {done.returncode}")
    pieces: List[Dict[str, Any]] = json.loads(done.stdout)["pieces"]
    return pieces


def _config_json(msg: Any) -> Dict[str, Any]:
    """The job config the wire message holds, as the binary reads a config
    file (every path absolute already)."""
    return {
        "seq_len": msg.seq_len, "batch_size": msg.batch_size, "seed": msg.seed,
        "logical_shards": msg.logical_shards, "eos_id": msg.eos_id, "bos_id": msg.bos_id, "pad_id": msg.pad_id,
        "epochs": msg.epochs, "shuffle_window": msg.shuffle_window, "run_tokens": msg.run_tokens,
        "datasets": [{"name": d.name, "path": d.path, "format": d.format, "weight": d.weight, "dtype": d.dtype,
                      "field": d.field, "tokenizer": d.tokenizer, "on_bad_record": d.on_bad_record}
                     for d in msg.datasets],
        "schedule": [{"step": p.step, "weights": dict(p.weights), "linear": p.linear} for p in msg.schedule],
        "skip_steps": [[r.first, r.last] for r in msg.skip_steps],
        "blocklist": {"documents": [_blocked_json(d) for d in msg.blocklist.documents],
                      "files": list(msg.blocklist.files)},
    }


def _blocked_json(d: Any) -> Dict[str, Any]:
    """A blocklist entry as the binary reads it: document, line and row only when set."""
    out: Dict[str, Any] = {"dataset": d.dataset, "file": d.file, "sha256": d.sha256}
    for key in ("document", "line", "row"):
        if d.HasField(key):
            out[key] = getattr(d, key)
    return out
