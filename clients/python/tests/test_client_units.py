"""Client-side pieces without a daemon: config checking and the error mapping."""

import grpc
import numpy as np
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
    assert c.run_tokens == 0
    assert to_proto({**BASE, "run_tokens": 1 << 22}, "/").run_tokens == 1 << 22


@pytest.mark.parametrize("edit,match", [
    ({"seqlen": 8}, r"unknown key 'seqlen'; known keys: batch_size, blocklist, bos_id, datasets"),
    ({"seq_len": "8"}, r"'seq_len' has the wrong type: '8' is a str, want int"),
    ({"batch_size": 2.5}, r"'batch_size' has the wrong type: 2.5"),
    ({"epochs": True}, r"'epochs' has the wrong type: True"),
    ({"seed": -1}, r"'seed' must not be negative"),
    ({"run_tokens": -1}, r"'run_tokens' must not be negative"),
    ({"datasets": [{"name": "a", "path": "/a", "format": "megatron", "wieght": 2}]},
     r"datasets\[0\]: unknown key 'wieght'; known keys: dtype, field, format, name, on_bad_record, path, tokenizer, weight"),
    ({"datasets": [{"name": "a", "path": "/a", "format": "megatron", "weight": "2"}]},
     r"datasets\[0\]: 'weight' has the wrong type: '2'"),
    ({"datasets": ["a"]}, r"datasets\[0\] must be a mapping"),
    ({"metadata": "loss_mask"}, r"'metadata' has the wrong type: 'loss_mask' is a str, want list"),
    ({"metadata": ["loss_mask", 3]}, r"metadata\[1\] must be a field name"),
    ({"mask_document_boundaries": 1}, r"'mask_document_boundaries' has the wrong type: 1 is a int, want bool"),
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


def _control_file(tmp_path):
    import struct
    from dataloaderd import _ring_layout as L
    buf = bytearray(4096)
    buf[0:8] = L.MAGIC
    struct.pack_into("<I", buf, L.HEADER_VERSION, L.VERSION)
    struct.pack_into("<I", buf, L.HEADER_SLOTS, 2)
    struct.pack_into("<Q", buf, L.HEADER_DATA_OFFSET, 4096)
    struct.pack_into("<Q", buf, L.HEADER_STRIDE, 4096)
    struct.pack_into("<I", buf, L.HEADER_SLOT_RECORDS, L.HEADER_BYTES)
    struct.pack_into("<I", buf, L.HEADER_CONSUMER_RECORDS, 2 * L.HEADER_BYTES)
    path = tmp_path / "ring"
    path.write_bytes(bytes(buf))
    return str(path)


@pytest.mark.parametrize("after_reads", [0, 1, 2, 3])
def test_control_poll_never_ends_before_a_published_step(tmp_path, after_reads):
    # The daemon publishes the last step and then sets ENDED, back to back.
    # Whichever of the client's reads that lands between, poll must never
    # answer "ended" for a step that was published before the state it read.
    from dataloaderd import _control
    from dataloaderd import _ring_layout as L
    ctl = _control.Control(_control_file(tmp_path), 4096, 0)
    u64, u32 = ctl._u64, ctl._u32
    reads = [0]

    def daemon_acts():
        u64[(L.HEADER_BYTES + L.SLOT_RECORD_STEP) // 8] = 1  # slot 0 holds step 1
        u32[(L.HEADER_BYTES + L.SLOT_RECORD_LINES) // 4] = 5
        u32[(L.HEADER_BYTES + L.SLOT_RECORD_SEGMENTS) // 4] = 7
        u32[(L.HEADER_BYTES + L.SLOT_RECORD_MAX_SEQLEN) // 4] = 9
        u64[_control._PUBLISHED // 8] = 1
        u32[_control._STATE // 4] = _control.ENDED

    class View:
        def __init__(self, real):
            self.real = real

        def __getitem__(self, i):
            if reads[0] == after_reads:
                daemon_acts()
            reads[0] += 1
            return self.real[i]

        def __setitem__(self, i, v):
            self.real[i] = v

    ctl._u64, ctl._u32 = View(u64), View(u32)
    state, got = ctl.poll(1)
    ctl._u64, ctl._u32 = u64, u32
    if reads[0] <= after_reads:
        daemon_acts()  # poll read less than that: the daemon acts after it
    assert not (state == _control.ENDED and got is None), "the published last step was reported as ended"
    assert ctl.poll(1) == (_control.RUNNING, (0, 5, 7, 9))
    ctl.close()


@pytest.mark.parametrize("slots", [2, 3, 8])
def test_cuda_fence_leaves_the_daemon_a_slot(monkeypatch, slots):
    # The loader gives each device batch up to a ReleaseFence when it asks for
    # the next; with GPU work still queued on them, the fence must never hold
    # so many that the daemon has no slot for the batch the loader waits for.
    import types
    from dataloaderd import _cuda
    from dataloaderd._delivery import _fence_hold

    class Event:
        def record(self, stream):
            self.done = False  # the trainer's kernels are still queued

        def query(self):
            return self.done

        def synchronize(self):
            self.done = True

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event, current_stream=lambda d: None),
                                 device=lambda kind, i: (kind, i))
    monkeypatch.setattr(_cuda, "_torch", lambda: fake)
    fence = _cuda.ReleaseFence(0, max_held=_fence_hold(slots))
    released, held = 0, None
    for step in range(1, 50):
        if held is not None:
            for k in fence.give_up(held):
                released = max(released, k)
        # The daemon produces `step` into the slot of step - slots.
        assert step - slots <= released, f"{slots} slots: waiting for step {step}, the fence holds step {step - slots}"
        held = step


def test_declared_dependencies_cover_the_generated_stubs():
    # pip must not install the client next to a grpcio or protobuf that the
    # committed stubs refuse at import (they check their generator's versions).
    import os
    import re

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.join(here, "..")
    with open(os.path.join(root, "pyproject.toml")) as f:
        deps = re.search(r"^dependencies = \[(.*)\]$", f.read(), re.M).group(1)
    declared = dict(re.findall(r'"(grpcio|protobuf)>=([0-9.]+)', deps))
    with open(os.path.join(root, "src", "dataloaderd", "_proto", "dataloader_pb2_grpc.py")) as f:
        grpc_gen = re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", f.read()).group(1)
    with open(os.path.join(root, "src", "dataloaderd", "_proto", "dataloader_pb2.py")) as f:
        m = re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", f.read())
    proto_gen = ".".join(m.groups())

    def key(v):
        return tuple(int(x) for x in v.split("."))

    assert key(declared["grpcio"]) >= key(grpc_gen), (declared, grpc_gen)
    assert key(declared["protobuf"]) >= key(proto_gen), (declared, proto_gen)
    major = int(proto_gen.split(".")[0])
    assert re.search(r'"protobuf>=[0-9.]+,<%d"' % (major + 1), deps), f"protobuf needs an upper bound <{major + 1}: {deps}"


def test_public_names():
    # Every exception the client raises, and the batch type, are importable
    # from the package and listed in its __all__.
    import dataloaderd
    from dataloaderd import errors

    raised = {name for name, value in vars(errors).items()
              if isinstance(value, type) and issubclass(value, dataloaderd.DataloaderdError)}
    assert raised <= set(dataloaderd.__all__), raised - set(dataloaderd.__all__)
    assert all(getattr(dataloaderd, name) is getattr(errors, name) for name in raised)
    assert dataloaderd.Batch.__required_keys__ == {"tokens", "input_ids", "labels", "shift_labels", "step", "lines",
                                                   "padding", "batch_id"}
    assert dataloaderd.Batch.__optional_keys__ == {"position_ids", "document_ids", "dataset_ids", "loss_mask",
                                                   "cu_seqlens", "line_segments", "max_seqlen"}


@pytest.mark.parametrize("max_skip, want", [(0, 32), (65536, 32), (64, 32), (32, 16), (16, 8), (3, 1), (2, 1)])
def test_recovery_kept_within_the_daemons_skip(max_skip, want):
    """The loader keeps the state a reconnect reopens from at most half the
    batches the daemon says it may skip at a reopen (max_skip_steps; 0 from
    older daemons: every 32), so a reopen after a daemon restart is never
    refused for skipping too far (with batches over 2^25 tokens it was)."""
    from dataloaderd._proto import dataloader_pb2 as pb
    from dataloaderd._reconnect import recovery_steps
    assert recovery_steps(pb.OpenSessionResponse(max_skip_steps=max_skip)) == want


def test_int64_keys_reuse_only_arrays_nothing_holds():
    """The default dtype's keys are planes of one int64 array per batch,
    which a later batch reuses only once nothing references it: a batch, a
    key or a view kept by the trainer stays as it was."""
    from dataloaderd.batch import Buffers, make_batch

    def lines(i):
        return np.arange(i, i + 2 * 9, dtype=np.int32).reshape(2, 9)

    def check(batch, i):
        t = lines(i)
        assert np.array_equal(batch["input_ids"], t[:, :-1]) and np.array_equal(batch["labels"], t[:, :-1])
        assert np.array_equal(batch["shift_labels"], t[:, 1:]) and batch["input_ids"].dtype == np.int64

    buffers = Buffers()
    kept = make_batch(lines(0), 1, "int64", None, buffers=buffers)
    arrays = set()
    for i in range(1, 6):
        batch = make_batch(lines(i), i + 1, "int64", None, buffers=buffers)
        check(batch, i)
        arrays.add(id(batch["input_ids"].base))
        del batch
    assert len(arrays) == 1, "a dropped batch's array was not reused"
    check(kept, 0)
    view = make_batch(lines(6), 7, "int64", None, buffers=buffers)["shift_labels"][:, 2:]
    for i in range(7, 12):
        check(make_batch(lines(i), i + 1, "int64", None, buffers=buffers), i)
    check(kept, 0)
    assert np.array_equal(view, lines(6)[:, 3:])


@pytest.mark.parametrize("consumers", [1, 2])
def test_recovery_keeps_the_changes_to_replay(consumers):
    """A loader keeps the set_weights calls a reopened session lacks: those
    from the step of the state it would reopen from (a group's consumers:
    the state before the latest); older ones are in that state's log. The
    reopen's arguments come from that state, or else the user's resume
    point, which stays as it was."""
    from dataloaderd._proto import dataloader_pb2 as pb
    from dataloaderd._reconnect import OpenArgs, Recovery

    rec = Recovery(60.0, consumers)
    user = OpenArgs(resume_from="/ckpt")
    rec.changes.add(3, {"a": 1.0})
    rec.changes.add(40, {"a": 2.0})
    args = rec.reopen_args(user, 50, 1.5)
    assert args.resume_from == "/ckpt" and args.reconnected_after_ns == 1_500_000_000
    assert (args.skip_to_step, args.reconnect_step) == ((50, 0) if consumers == 1 else (0, 50))
    rec.keep(32, pb.ShardedState(run=b"32"))
    rec.keep(64, pb.ShardedState(run=b"64"))
    kept = 64 if consumers == 1 else 32
    assert rec.changes.since(0) == ([] if consumers == 1 else [(40, {"a": 2.0})])
    assert rec.reopen_args(user, 70, 0).resume_sharded.run == str(kept).encode()
    assert user == OpenArgs(resume_from="/ckpt")
    rec.changes.add(70, {"a": 3.0})
    rec.changes.add(65, {"a": 4.0})  # replaces those for its step and after
    assert rec.changes.since(kept)[-1] == (65, {"a": 4.0}) and (70, {"a": 3.0}) not in rec.changes.since(0)
    rec.forget()
    assert rec.changes.since(0) == [] and rec.reopen_args(user, 80, 0).resume_from == "/ckpt"


def test_dtype_names_types_and_dtypes():
    """dtype= takes "int64", numpy.int64, numpy.dtype("int64") (and torch.int64,
    whose str is "torch.int64"), as the README says; nothing else."""
    from dataloaderd._options import check_options

    def dtype_of(d):
        return check_options("shm", d, "stop", 0, 1, 0, False, True, 60.0, 600.0, 60.0).dtype

    assert [dtype_of(d) for d in ("int64", np.int64, np.dtype("int64"), "int32", np.int32)] == \
        ["int64", "int64", "int64", "int32", "int32"]
    for bad in ("int16", np.int16, np.float32, 64):
        with pytest.raises(ConfigError, match="dtype"):
            dtype_of(bad)
