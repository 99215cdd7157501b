"""The daemon's errors of object storage become the package's exceptions: a
store that cannot serve is ObjectStorageError, never DaemonUnavailableError
(which makes the loader reconnect to a daemon that is up)."""

import grpc
import pytest

from corpus import make_corpus
from dataloaderd import (ConfigError, DaemonUnavailableError, FileChangedError, Loader, ObjectStorageError,
                         PathNotAllowedError, ResourceExhaustedError)
from dataloaderd.errors import translate
from test_objects import BUCKET, s3  # noqa: F401 (a fixture)


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


GONE = ('source: dataset "web": object storage: get 0-65535 s3://b/web/x.bin (14 attempts in 2m0s): '
        'dial tcp 10.0.0.1:9000: connection refused')


@pytest.mark.parametrize("code,details,cls", [
    (grpc.StatusCode.UNAVAILABLE, GONE, ObjectStorageError),
    (grpc.StatusCode.UNAVAILABLE, 'source: dataset "web": object storage: object storage is not enabled on this daemon',
     ObjectStorageError),
    (grpc.StatusCode.UNAVAILABLE, "daemon is shutting down", DaemonUnavailableError),
    (grpc.StatusCode.PERMISSION_DENIED, "object storage: head s3://b/web/x.bin: StatusCode: 403", PathNotAllowedError),
    (grpc.StatusCode.DATA_LOSS, "object storage: get 0-9 s3://b/web/x.bin: object changed since it was opened",
     FileChangedError),
    (grpc.StatusCode.INVALID_ARGUMENT, "object storage: head s3://b/web/x.bin: answer refused: size 1125899906842624",
     ConfigError),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "object storage: over the object cache's bounds", ResourceExhaustedError),
])
def test_object_storage_errors(code, details, cls):
    @translate
    def call():
        raise FakeRpcError(code, details)

    with pytest.raises(cls) as info:
        call()
    assert type(info.value) is cls and str(info.value) == details and info.value.code == code.name
    assert not isinstance(info.value, DaemonUnavailableError) or "object storage" not in details


# Through the real daemon and S3 server (test_objects.py's fixture s3).


def _s3_config(s3):  # noqa: F811 (the fixture's value)
    (s3.root / BUCKET / "corpus").mkdir(parents=True)
    datasets, _ = make_corpus(str(s3.root / BUCKET / "corpus"))
    for d in datasets:
        d["path"] = f"s3://{BUCKET}/corpus/" + d["path"].rsplit("/", 1)[-1]
    return {"seq_len": 17, "batch_size": 2, "logical_shards": 4, "eos_id": 0, "datasets": datasets}


def test_a_store_gone_is_object_storage_error(s3, daemon_factory, monkeypatch):  # noqa: F811
    s3.environ(monkeypatch)
    config = _s3_config(s3)
    daemon = daemon_factory("--object-retry-for", "1s")
    s3.proc.terminate()
    s3.proc.wait(timeout=30)
    with pytest.raises(ObjectStorageError, match=f"object storage: .*s3://{BUCKET}/corpus/") as info:
        with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1) as loader:
            next(iter(loader))
    assert info.value.code == "UNAVAILABLE"


def test_refused_credentials_are_path_not_allowed(s3, daemon_factory, monkeypatch):  # noqa: F811
    s3.environ(monkeypatch)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + s3.secret)
    config = _s3_config(s3)
    daemon = daemon_factory("--object-retry-for", "1s")
    with pytest.raises(PathNotAllowedError, match=f"s3://{BUCKET}/corpus/.*403") as info:
        with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1) as loader:
            next(iter(loader))
    assert info.value.code == "PERMISSION_DENIED" and s3.secret not in str(info.value)
