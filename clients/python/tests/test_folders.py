"""Checkpoint folders are the daemon's to read and write, never the client's:
a resume folder's rank files are read by the daemon alone (a FIFO or a huge
file there does not hang or fill the trainer), a URL is refused as a folder
on both sides (it used to become a local ./s3:/... folder), and a save the
daemon cannot write is a PathNotAllowedError naming the folder (it used to be
the base exception, INTERNAL)."""

import builtins
import io
import os
import tempfile
import subprocess
import time

import grpc
import pytest

from rundaemon import BIN
from dataloaderd import ConfigError, DataloaderdError, Loader, PathNotAllowedError
from dataloaderd._proto import dataloader_pb2 as pb
from dataloaderd._proto import dataloader_pb2_grpc as pb_grpc


def forbid_client_reads(monkeypatch, folder):
    """Fails any open by this process of a file under folder (the daemon is
    another process, and reads it)."""
    real_open, real_os_open = builtins.open, os.open

    def guarded(real):
        def call(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)) and os.path.abspath(os.fspath(path)).startswith(folder):
                raise AssertionError(f"the client opened {path}, a file of the resume folder")
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(builtins, "open", guarded(real_open))
    monkeypatch.setattr(io, "open", guarded(real_open))
    monkeypatch.setattr(os, "open", guarded(real_os_open))


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_resume_folder_read_by_the_daemon_only(daemon, config, tmp_path, monkeypatch, kind):
    # Before, Loader(resume_from=) read the first rank file itself to know
    # its step: a FIFO hung the constructor forever, a 3 GB file (or
    # /dev/zero) was read whole into the trainer's memory.
    ckpt = str(tmp_path / "ckpt")
    rank_file = os.path.join(ckpt, "dataloader", "rank-0-of-1.json")
    os.makedirs(os.path.dirname(rank_file))
    if kind == "fifo":
        os.mkfifo(rank_file)
    else:
        with open(rank_file, "wb") as f:
            f.truncate(3 << 30)  # sparse: 3 GB that take no disk
    forbid_client_reads(monkeypatch, ckpt)
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job=kind, resume_from=ckpt) as loader:
        want = "not a regular file" if kind == "fifo" else "more than the"
        with pytest.raises(DataloaderdError, match=want) as err:
            loader.step  # the daemon reads the folder, and says
        assert rank_file in str(err.value)


def test_object_storage_is_not_a_folder(daemon, config, tmp_path, monkeypatch):
    # Before, save("s3://bucket/ckpt") became ./s3:/bucket/ckpt, a local
    # folder the daemon wrote; and the daemon's own refusal (for a client
    # that sends the URL as it is) was INTERNAL.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="'s3://bucket/ckpt'.*local"):
        Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="s3r", resume_from="s3://bucket/ckpt")
    with Loader(config, dp_rank=0, dp_size=1, socket=daemon.socket, job="s3") as loader:
        next(iter(loader))
        with pytest.raises(ConfigError, match="'s3://bucket/ckpt'.*local"):
            loader.save("s3://bucket/ckpt")
        sid = loader._session.session_id
        with grpc.insecure_channel("unix://" + daemon.socket) as ch:
            stub = pb_grpc.LoaderStub(ch)
            with pytest.raises(grpc.RpcError) as err:
                stub.SaveState(pb.SaveStateRequest(session_id=sid, folder="s3://bucket/ckpt"), timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "local" in err.value.details()
            with pytest.raises(grpc.RpcError) as err:
                stub.OpenSession(pb.OpenSessionRequest(job="s3o", config=loader._config, dp_rank=0, dp_size=1,
                                                       resume_from="s3://bucket/ckpt"), timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "s3://bucket/ckpt" in err.value.details()
    assert not (tmp_path / "s3:").exists(), "a local s3: folder was made"


def open_to_others(path):
    """Lets another user traverse the directories down to path."""
    top = os.path.realpath(tempfile.gettempdir())
    for d in [path, *path.parents]:
        if str(d) in (top, "/"):
            break
        os.chmod(d, 0o711)


def test_save_into_a_folder_the_daemon_cannot_write(config, tmp_path):
    # The daemon runs as a user who may not write the folder: nobody when
    # the tests run as root (whom modes do not stop), else the tests' user.
    # Before, the daemon's EACCES was INTERNAL, the base exception.
    root = os.geteuid() == 0
    uid = 65534 if root else os.geteuid()
    open_to_others(tmp_path)
    run, ro = tmp_path / "run", tmp_path / "ro"
    for d in (run, ro):
        d.mkdir()
        os.chown(d, uid, -1)
    os.chmod(ro, 0o555)
    sock = str(run / "d.sock")
    as_user = {"user": uid, "group": uid, "extra_groups": []} if root else {}
    with open(tmp_path / "daemon.log", "w") as log:
        proc = subprocess.Popen([BIN, "serve", "--socket", sock, "--log-level", "warn"], stdout=log,
                                stderr=subprocess.STDOUT, **as_user)
    try:
        for _ in range(200):
            if subprocess.run([BIN, "healthcheck", "--socket", sock, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                break
            assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
            time.sleep(0.05)
        with Loader(config, dp_rank=0, dp_size=1, socket=sock, transport="inline", job="ro") as loader:
            next(iter(loader))
            with pytest.raises(PathNotAllowedError, match=f"save folder \"{ro}\".*cannot write") as err:
                loader.save(str(ro))
            assert err.value.code == "PERMISSION_DENIED"
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, (tmp_path / "daemon.log").read_text()
