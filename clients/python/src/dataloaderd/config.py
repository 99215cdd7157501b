"""Job configs: a dict, or a YAML/JSON file, checked here and turned into the
wire message. Relative dataset paths are made absolute (the daemon has its own
working directory)."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ._proto import dataloader_pb2 as pb
from ._skips import check_skip_steps
from .errors import ConfigError

__all__ = ["load_config", "to_proto", "check_weights", "KEYS", "DATASET_KEYS", "SCHEDULE_KEYS", "BLOCKLIST_KEYS",
           "BLOCKED_KEYS"]

# key: (type or types, default); a default of ... means required.
Keys = Dict[str, Tuple[Union[type, Tuple[type, ...]], object]]
KEYS: Keys = {
    "seq_len": (int, ...),
    "batch_size": (int, ...),
    "seed": (int, 0),
    "logical_shards": (int, 64),
    "eos_id": (int, ...),
    "bos_id": ((int, type(None)), None),
    "pad_id": ((int, type(None)), None),
    "epochs": (int, 0),
    "shuffle_window": (int, 0),
    "run_tokens": (int, 0),
    "datasets": (list, ...),
    "metadata": (list, []),
    "positions": (str, ""),
    "mask_document_boundaries": (bool, False),
    "schedule": (list, []),
    "skip_steps": (list, []),
    "blocklist": (dict, {}),
}
BLOCKLIST_KEYS: Keys = {
    "documents": (list, []),
    "files": (list, []),
}
BLOCKED_KEYS: Keys = {
    "dataset": (str, ...),
    "file": (str, ""),
    "document": ((int, type(None)), None),
    "sha256": (str, ""),
    "line": ((int, type(None)), None),
    "row": ((int, type(None)), None),
}
SCHEDULE_KEYS: Keys = {
    "step": (int, ...),
    "weights": (dict, ...),
    "linear": (bool, False),
}
DATASET_KEYS: Keys = {
    "name": (str, ...),
    "path": (str, ...),
    "format": (str, ...),
    "weight": ((int, float), 1.0),
    "dtype": (str, ""),
    "field": (str, ""),
    "tokenizer": (str, ""),
    "on_bad_record": (str, ""),
}


def load_config(config: Union[str, os.PathLike[str], Mapping[str, object]]) -> Tuple[Dict[str, object], str]:
    """Returns (config dict, directory relative paths are resolved against)."""
    if isinstance(config, Mapping):
        return dict(config), os.getcwd()
    path = os.fspath(config)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror}") from e
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ConfigError(f"config file {path}: YAML needs PyYAML (pip install dataloaderd[yaml])") from e
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path}: {e}") from e
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config file {path}: not valid JSON: {e}") from e
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path}: the top level must be a mapping")
    return dict(data), os.path.dirname(os.path.abspath(path))


def _check(where: str, data: Mapping[str, object], keys: Keys) -> Dict[str, Any]:
    """The keys of data with their defaults filled in, each of its declared type
    (so the values may be used as such)."""
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(keys))}")
    out = {}
    for key, (typ, default) in keys.items():
        if key not in data or data[key] is None and default is not ...:
            if default is ...:
                raise ConfigError(f"{where}: {key!r} is required")
            out[key] = default
            continue
        value = data[key]
        if isinstance(value, bool) and typ is not bool or not isinstance(value, typ):
            raise ConfigError(f"{where}: {key!r} has the wrong type: {value!r} is a "
                              f"{type(value).__name__}, want {_type_name(typ)}")
        out[key] = value
    return out


def _type_name(typ: Union[type, Tuple[type, ...]]) -> str:
    types = typ if isinstance(typ, tuple) else (typ,)
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def to_proto(data: Mapping[str, object], base_dir: str) -> "pb.JobConfig":
    """Checks a config dict and builds the wire message."""
    c = _check("config", data, KEYS)
    for key in ("seq_len", "batch_size", "logical_shards", "epochs", "shuffle_window", "run_tokens", "seed"):
        if c[key] < 0:
            raise ConfigError(f"config: {key!r} must not be negative, got {c[key]}")
    msg = pb.JobConfig(
        seq_len=c["seq_len"], batch_size=c["batch_size"], seed=c["seed"],
        logical_shards=c["logical_shards"], eos_id=c["eos_id"],
        bos_id=-1 if c["bos_id"] is None else c["bos_id"],
        pad_id=c["eos_id"] if c["pad_id"] is None else c["pad_id"],
        epochs=c["epochs"], shuffle_window=c["shuffle_window"], run_tokens=c["run_tokens"],
        positions=c["positions"], mask_document_boundaries=c["mask_document_boundaries"],
    )
    for i, p in enumerate(c["schedule"]):
        if not isinstance(p, Mapping):
            raise ConfigError(f"config: schedule[{i}] must be a mapping, got {p!r}")
        pt = _check(f"schedule[{i}]", p, SCHEDULE_KEYS)
        if pt["step"] < 0:
            raise ConfigError(f"config: schedule[{i}]: 'step' must not be negative, got {pt['step']}")
        for name, w in pt["weights"].items():
            if not isinstance(name, str) or isinstance(w, bool) or not isinstance(w, (int, float)):
                raise ConfigError(f"config: schedule[{i}]: weights must map dataset names to numbers, got {name!r}: {w!r}")
        msg.schedule.append(pb.SchedulePoint(step=pt["step"], weights={k: float(v) for k, v in pt["weights"].items()},
                                             linear=pt["linear"]))
    for first, last in check_skip_steps(c["skip_steps"]):
        msg.skip_steps.append(pb.StepRange(first=first, last=last))
    _blocklist(msg, c["blocklist"], base_dir)
    for i, m in enumerate(c["metadata"]):
        if not isinstance(m, str):
            raise ConfigError(f"config: metadata[{i}] must be a field name (a string), got {m!r}")
        msg.metadata.append(m)
    for i, d in enumerate(c["datasets"]):
        if not isinstance(d, Mapping):
            raise ConfigError(f"config: datasets[{i}] must be a mapping, got {d!r}")
        ds = _check(f"datasets[{i}]", d, DATASET_KEYS)
        path = ds["path"]
        if not path.startswith("s3://"):  # object storage URLs go as they are
            path = os.path.expanduser(path)
            if not os.path.isabs(path):
                path = os.path.join(base_dir, path)
        tokenizer = ds["tokenizer"]
        if tokenizer and (os.sep in tokenizer or tokenizer.endswith((".json", ".tiktoken"))):
            tokenizer = os.path.join(base_dir, os.path.expanduser(tokenizer))
        msg.datasets.append(pb.Dataset(name=ds["name"], path=path, format=ds["format"],
                                       weight=float(ds["weight"]), dtype=ds["dtype"], field=ds["field"],
                                       tokenizer=tokenizer, on_bad_record=ds["on_bad_record"]))
    return msg


def _blocklist(msg: "pb.JobConfig", data: Mapping[str, object], base_dir: str) -> None:
    """Checks the blocklist's keys and types (the daemon checks its entries
    against the datasets) into msg; relative file paths are taken against
    base_dir."""
    if not data:
        return
    b = _check("blocklist", data, BLOCKLIST_KEYS)
    for i, d in enumerate(b["documents"]):
        if not isinstance(d, Mapping):
            raise ConfigError(f"config: blocklist.documents[{i}] must be a mapping, got {d!r}")
        e = _check(f"blocklist.documents[{i}]", d, BLOCKED_KEYS)
        for key in ("document", "line", "row"):
            if e[key] is not None and e[key] < 0:
                raise ConfigError(f"config: blocklist.documents[{i}]: {key!r} must not be negative, got {e[key]}")
        msg.blocklist.documents.append(pb.BlockedDocument(dataset=e["dataset"], file=e["file"], document=e["document"],
                                                          sha256=e["sha256"], line=e["line"], row=e["row"]))
    for i, f in enumerate(b["files"]):
        if not isinstance(f, str):
            raise ConfigError(f"config: blocklist.files[{i}] must be a path (a string), got {f!r}")
        msg.blocklist.files.append(os.path.join(base_dir, os.path.expanduser(f)))


def env_int(name: str, default: int) -> int:
    """The integer in environment variable ``name``, or ``default`` when unset."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as e:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from e


def optional_abspath(path: Optional[Union[str, os.PathLike[str]]]) -> str:
    """An absolute path for the daemon (it has another working directory); "" for None."""
    return "" if path is None else os.path.abspath(os.path.expanduser(os.fspath(path)))


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def local_folder(what: str, path: Optional[Union[str, os.PathLike[str]]]) -> str:
    """optional_abspath of a checkpoint folder (``what``: "save folder",
    "resume_from"), refusing a URL before it becomes a local path such as
    ``./s3:/bucket/ckpt``: the daemon saves and resumes states in local (or
    mounted) folders only."""
    if path is not None and _URL.match(os.fspath(path)):
        raise ConfigError(f"{what} {os.fspath(path)!r}: loader states are saved and resumed in a local (or mounted) "
                          "folder, not object storage or another URL; save them with the model's checkpoint through "
                          "state_dict() and torch.distributed.checkpoint to put them in object storage")
    return optional_abspath(path)


def check_weights(weights: Mapping[str, float]) -> Dict[str, float]:
    """set_weights' weights: dataset names to numbers (the daemon checks the
    names and values)."""
    bad = [f"{k!r}: {v!r}" for k, v in weights.items()
           if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise ConfigError(f"set_weights: weights must map dataset names to numbers, got {', '.join(bad)}")
    return {k: float(v) for k, v in weights.items()}
