from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Transport(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSPORT_UNSPECIFIED: _ClassVar[Transport]
    TRANSPORT_SHM: _ClassVar[Transport]
    TRANSPORT_INLINE: _ClassVar[Transport]
    TRANSPORT_CUDA: _ClassVar[Transport]
TRANSPORT_UNSPECIFIED: Transport
TRANSPORT_SHM: Transport
TRANSPORT_INLINE: Transport
TRANSPORT_CUDA: Transport

class Dataset(_message.Message):
    __slots__ = ("name", "path", "format", "weight", "dtype", "field", "tokenizer", "on_bad_record")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    ON_BAD_RECORD_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    format: str
    weight: float
    dtype: str
    field: str
    tokenizer: str
    on_bad_record: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., format: _Optional[str] = ..., weight: _Optional[float] = ..., dtype: _Optional[str] = ..., field: _Optional[str] = ..., tokenizer: _Optional[str] = ..., on_bad_record: _Optional[str] = ...) -> None: ...

class JobConfig(_message.Message):
    __slots__ = ("seq_len", "batch_size", "seed", "logical_shards", "eos_id", "bos_id", "pad_id", "epochs", "shuffle_window", "datasets")
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_SHARDS_FIELD_NUMBER: _ClassVar[int]
    EOS_ID_FIELD_NUMBER: _ClassVar[int]
    BOS_ID_FIELD_NUMBER: _ClassVar[int]
    PAD_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    seq_len: int
    batch_size: int
    seed: int
    logical_shards: int
    eos_id: int
    bos_id: int
    pad_id: int
    epochs: int
    shuffle_window: int
    datasets: _containers.RepeatedCompositeFieldContainer[Dataset]
    def __init__(self, seq_len: _Optional[int] = ..., batch_size: _Optional[int] = ..., seed: _Optional[int] = ..., logical_shards: _Optional[int] = ..., eos_id: _Optional[int] = ..., bos_id: _Optional[int] = ..., pad_id: _Optional[int] = ..., epochs: _Optional[int] = ..., shuffle_window: _Optional[int] = ..., datasets: _Optional[_Iterable[_Union[Dataset, _Mapping]]] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("job", "config", "dp_rank", "dp_size", "consumers", "transport", "resume_from", "resume_states", "slots", "device")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    RESUME_STATES_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    job: str
    config: JobConfig
    dp_rank: int
    dp_size: int
    consumers: int
    transport: Transport
    resume_from: str
    resume_states: _containers.RepeatedScalarFieldContainer[bytes]
    slots: int
    device: int
    def __init__(self, job: _Optional[str] = ..., config: _Optional[_Union[JobConfig, _Mapping]] = ..., dp_rank: _Optional[int] = ..., dp_size: _Optional[int] = ..., consumers: _Optional[int] = ..., transport: _Optional[_Union[Transport, str]] = ..., resume_from: _Optional[str] = ..., resume_states: _Optional[_Iterable[bytes]] = ..., slots: _Optional[int] = ..., device: _Optional[int] = ...) -> None: ...

class Ring(_message.Message):
    __slots__ = ("path", "slots", "slot_bytes", "slot_stride", "data_offset", "ipc_handle", "device", "control_path", "control_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    SLOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    SLOT_STRIDE_FIELD_NUMBER: _ClassVar[int]
    DATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    IPC_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PATH_FIELD_NUMBER: _ClassVar[int]
    CONTROL_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    slots: int
    slot_bytes: int
    slot_stride: int
    data_offset: int
    ipc_handle: bytes
    device: int
    control_path: str
    control_bytes: int
    def __init__(self, path: _Optional[str] = ..., slots: _Optional[int] = ..., slot_bytes: _Optional[int] = ..., slot_stride: _Optional[int] = ..., data_offset: _Optional[int] = ..., ipc_handle: _Optional[bytes] = ..., device: _Optional[int] = ..., control_path: _Optional[str] = ..., control_bytes: _Optional[int] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id", "consumer", "ring", "transport", "line_tokens", "batch_size", "start_step")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    RING_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    LINE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    START_STEP_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    consumer: int
    ring: Ring
    transport: Transport
    line_tokens: int
    batch_size: int
    start_step: int
    def __init__(self, session_id: _Optional[str] = ..., consumer: _Optional[int] = ..., ring: _Optional[_Union[Ring, _Mapping]] = ..., transport: _Optional[_Union[Transport, str]] = ..., line_tokens: _Optional[int] = ..., batch_size: _Optional[int] = ..., start_step: _Optional[int] = ...) -> None: ...

class Attach(_message.Message):
    __slots__ = ("session_id", "consumer", "shm_control")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    SHM_CONTROL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    consumer: int
    shm_control: bool
    def __init__(self, session_id: _Optional[str] = ..., consumer: _Optional[int] = ..., shm_control: _Optional[bool] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("slot", "step", "wait_ns")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    slot: int
    step: int
    wait_ns: int
    def __init__(self, slot: _Optional[int] = ..., step: _Optional[int] = ..., wait_ns: _Optional[int] = ...) -> None: ...

class BatchesRequest(_message.Message):
    __slots__ = ("attach", "release")
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    attach: Attach
    release: Release
    def __init__(self, attach: _Optional[_Union[Attach, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("step", "slot", "lines", "data", "end")
    STEP_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    step: int
    slot: int
    lines: int
    data: bytes
    end: bool
    def __init__(self, step: _Optional[int] = ..., slot: _Optional[int] = ..., lines: _Optional[int] = ..., data: _Optional[bytes] = ..., end: _Optional[bool] = ...) -> None: ...

class SaveStateRequest(_message.Message):
    __slots__ = ("session_id", "step", "folder")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    FOLDER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    step: int
    folder: str
    def __init__(self, session_id: _Optional[str] = ..., step: _Optional[int] = ..., folder: _Optional[str] = ...) -> None: ...

class SaveStateResponse(_message.Message):
    __slots__ = ("path", "bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    bytes: int
    def __init__(self, path: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ("session_id", "step")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    step: int
    def __init__(self, session_id: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class GetStateResponse(_message.Message):
    __slots__ = ("state", "dp_rank", "dp_size")
    STATE_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    state: bytes
    dp_rank: int
    dp_size: int
    def __init__(self, state: _Optional[bytes] = ..., dp_rank: _Optional[int] = ..., dp_size: _Optional[int] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id", "consumer")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    consumer: int
    def __init__(self, session_id: _Optional[str] = ..., consumer: _Optional[int] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
