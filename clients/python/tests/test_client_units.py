"""Client-side pieces without a daemon: config checking and the error mapping."""

import grpc
import pytest
import yaml

from dataloaderd import (ConfigError, DaemonUnavailableError, DataloaderdError, PathNotAllowedError,
                         SessionExistsError, SessionNotFoundError, StateError)
from dataloaderd.config import load_config, to_proto
from dataloaderd.errors import translate

BASE = {"seq_len": 8, "batch_size": 2, "eos_id": 0,
        "datasets": [{"name": "a", "path": "/data/a", "format": "megatron"}]}


def test_defaults():
    c = to_proto(BASE, "/")
    assert (c.seed, c.logical_shards, c.bos_id, c.pad_id, c.epochs, c.shuffle_window) == (0, 64, -1, 0, 0, 0)
    assert c.datasets[0].weight == 1.0 and c.datasets[0].dtype == ""
    c = to_proto({**BASE, "eos_id": 7, "bos_id": 3}, "/")
    assert (c.bos_id, c.pad_id) == (3, 7)


@pytest.mark.parametrize("edit,match", [
    ({"seqlen": 8}, r"unknown key 'seqlen'; known keys: batch_size, bos_id, datasets"),
    ({"seq_len": "8"}, r"'seq_len' has the wrong type: '8' is a str, want int"),
    ({"batch_size": 2.5}, r"'batch_size' has the wrong type: 2.5"),
    ({"epochs": True}, r"'epochs' has the wrong type: True"),
    ({"seed": -1}, r"'seed' must not be negative"),
    ({"datasets": [{"name": "a", "path": "/a", "format": "megatron", "wieght": 2}]},
     r"datasets\[0\]: unknown key 'wieght'; known keys: dtype, field, format, name, on_bad_record, path, tokenizer, weight"),
    ({"datasets": [{"name": "a", "path": "/a", "format": "megatron", "weight": "2"}]},
     r"datasets\[0\]: 'weight' has the wrong type: '2'"),
    ({"datasets": ["a"]}, r"datasets\[0\] must be a mapping"),
])
def test_bad_config(edit, match):
    with pytest.raises(ConfigError, match=match):
        to_proto({**BASE, **edit}, "/")


def test_required_key():
    with pytest.raises(ConfigError, match="'eos_id' is required"):
        to_proto({k: v for k, v in BASE.items() if k != "eos_id"}, "/")


def test_relative_paths_resolve_against_the_config_file(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    conf.mkdir()
    data = {**BASE, "datasets": [{"name": "a", "path": "../corpus/a", "format": "megatron", "weight": 2}]}
    (conf / "job.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir("/")
    c = to_proto(*load_config(str(conf / "job.yaml")))
    assert c.datasets[0].path == str(tmp_path / "conf" / ".." / "corpus" / "a")
    assert c.datasets[0].weight == 2.0
    monkeypatch.chdir(tmp_path)
    c = to_proto(*load_config(data))
    assert c.datasets[0].path == str(tmp_path / ".." / "corpus" / "a")


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_config(str(tmp_path / "missing.yaml"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="list.json: the top level must be a mapping"):
        load_config(str(tmp_path / "list.json"))


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize("code,cls", [
    (grpc.StatusCode.INVALID_ARGUMENT, ConfigError),
    (grpc.StatusCode.NOT_FOUND, SessionNotFoundError),
    (grpc.StatusCode.ALREADY_EXISTS, SessionExistsError),
    (grpc.StatusCode.FAILED_PRECONDITION, StateError),
    (grpc.StatusCode.PERMISSION_DENIED, PathNotAllowedError),
    (grpc.StatusCode.UNAVAILABLE, DaemonUnavailableError),
    (grpc.StatusCode.INTERNAL, DataloaderdError),
])
def test_error_mapping(code, cls):
    @translate
    def call():
        raise FakeRpcError(code, "the daemon's words")

    with pytest.raises(cls) as info:
        call()
    assert type(info.value) is cls and str(info.value) == "the daemon's words"
    assert info.value.code == code.name and isinstance(info.value.__cause__, grpc.RpcError)
