# ruff: noqa
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Spec(_message.Message):
    __slots__ = ("name", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    params: _containers.ScalarMap[str, float]
    def __init__(self, name: _Optional[str] = ..., params: _Optional[_Mapping[str, float]] = ...) -> None: ...

class PushOrigin(_message.Message):
    __slots__ = ("worker", "incarnation", "sequence")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    worker: str
    incarnation: int
    sequence: int
    def __init__(self, worker: _Optional[str] = ..., incarnation: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class TableLifecycle(_message.Message):
    __slots__ = ("admit_after", "evict_after_steps", "max_rows")
    ADMIT_AFTER_FIELD_NUMBER: _ClassVar[int]
    EVICT_AFTER_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    admit_after: int
    evict_after_steps: int
    max_rows: int
    def __init__(self, admit_after: _Optional[int] = ..., evict_after_steps: _Optional[int] = ..., max_rows: _Optional[int] = ...) -> None: ...

class CreateVariableRequest(_message.Message):
    __slots__ = ("name", "shape", "dtype", "initializer", "optimizer", "initial_value", "base", "base_rows", "row_offset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZER_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    INITIAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    BASE_ROWS_FIELD_NUMBER: _ClassVar[int]
    ROW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    initializer: Spec
    optimizer: Spec
    initial_value: Tensor
    base: str
    base_rows: int
    row_offset: int
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., initializer: _Optional[_Union[Spec, _Mapping]] = ..., optimizer: _Optional[_Union[Spec, _Mapping]] = ..., initial_value: _Optional[_Union[Tensor, _Mapping]] = ..., base: _Optional[str] = ..., base_rows: _Optional[int] = ..., row_offset: _Optional[int] = ...) -> None: ...

class CreateTableRequest(_message.Message):
    __slots__ = ("name", "dim", "dtype", "initializer", "optimizer", "lifecycle", "expected_rows", "num_shards")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZER_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ROWS_FIELD_NUMBER: _ClassVar[int]
    NUM_SHARDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    dim: int
    dtype: str
    initializer: Spec
    optimizer: Spec
    lifecycle: TableLifecycle
    expected_rows: int
    num_shards: int
    def __init__(self, name: _Optional[str] = ..., dim: _Optional[int] = ..., dtype: _Optional[str] = ..., initializer: _Optional[_Union[Spec, _Mapping]] = ..., optimizer: _Optional[_Union[Spec, _Mapping]] = ..., lifecycle: _Optional[_Union[TableLifecycle, _Mapping]] = ..., expected_rows: _Optional[int] = ..., num_shards: _Optional[int] = ...) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("created",)
    CREATED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    def __init__(self, created: _Optional[bool] = ...) -> None: ...

class PullDenseRequest(_message.Message):
    __slots__ = ("name", "chunk_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    chunk_bytes: int
    def __init__(self, name: _Optional[str] = ..., chunk_bytes: _Optional[int] = ...) -> None: ...

class PushDenseRequest(_message.Message):
    __slots__ = ("name", "grad", "origin")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRAD_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    grad: Tensor
    origin: PushOrigin
    def __init__(self, name: _Optional[str] = ..., grad: _Optional[_Union[Tensor, _Mapping]] = ..., origin: _Optional[_Union[PushOrigin, _Mapping]] = ...) -> None: ...

class TensorChunk(_message.Message):
    __slots__ = ("dtype", "shape", "offset", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    offset: int
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class PushDenseChunk(_message.Message):
    __slots__ = ("name", "origin", "chunk")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    name: str
    origin: PushOrigin
    chunk: TensorChunk
    def __init__(self, name: _Optional[str] = ..., origin: _Optional[_Union[PushOrigin, _Mapping]] = ..., chunk: _Optional[_Union[TensorChunk, _Mapping]] = ...) -> None: ...

class PullRowsRequest(_message.Message):
    __slots__ = ("name", "ids")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ids: Tensor
    def __init__(self, name: _Optional[str] = ..., ids: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class PushRowsRequest(_message.Message):
    __slots__ = ("name", "ids", "grads", "origin")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    GRADS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    ids: Tensor
    grads: Tensor
    origin: PushOrigin
    def __init__(self, name: _Optional[str] = ..., ids: _Optional[_Union[Tensor, _Mapping]] = ..., grads: _Optional[_Union[Tensor, _Mapping]] = ..., origin: _Optional[_Union[PushOrigin, _Mapping]] = ...) -> None: ...

class PushResponse(_message.Message):
    __slots__ = ("version", "duplicate")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    version: int
    duplicate: bool
    def __init__(self, version: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class SetHyperparamsRequest(_message.Message):
    __slots__ = ("names", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAMES_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    params: _containers.ScalarMap[str, float]
    def __init__(self, names: _Optional[_Iterable[str]] = ..., params: _Optional[_Mapping[str, float]] = ...) -> None: ...

class SetHyperparamsResponse(_message.Message):
    __slots__ = ("changed",)
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: int
    def __init__(self, changed: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VariableStats(_message.Message):
    __slots__ = ("name", "kind", "shape", "bytes", "pulls", "pushes", "optimizer", "rows_evicted", "rows_pending_admission", "grads_dropped")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PULLS_FIELD_NUMBER: _ClassVar[int]
    PUSHES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    ROWS_EVICTED_FIELD_NUMBER: _ClassVar[int]
    ROWS_PENDING_ADMISSION_FIELD_NUMBER: _ClassVar[int]
    GRADS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    bytes: int
    pulls: int
    pushes: int
    optimizer: str
    rows_evicted: int
    rows_pending_admission: int
    grads_dropped: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., bytes: _Optional[int] = ..., pulls: _Optional[int] = ..., pushes: _Optional[int] = ..., optimizer: _Optional[str] = ..., rows_evicted: _Optional[int] = ..., rows_pending_admission: _Optional[int] = ..., grads_dropped: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("shard_index", "variables", "parameters", "bytes_in", "bytes_out", "requests", "requests_per_sec", "update_latency_ms_mean", "update_latency_ms_max", "uptime_s")
    SHARD_INDEX_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    UPDATE_LATENCY_MS_MEAN_FIELD_NUMBER: _ClassVar[int]
    UPDATE_LATENCY_MS_MAX_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    shard_index: int
    variables: _containers.RepeatedCompositeFieldContainer[VariableStats]
    parameters: int
    bytes_in: int
    bytes_out: int
    requests: int
    requests_per_sec: float
    update_latency_ms_mean: float
    update_latency_ms_max: float
    uptime_s: float
    def __init__(self, shard_index: _Optional[int] = ..., variables: _Optional[_Iterable[_Union[VariableStats, _Mapping]]] = ..., parameters: _Optional[int] = ..., bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ..., requests: _Optional[int] = ..., requests_per_sec: _Optional[float] = ..., update_latency_ms_mean: _Optional[float] = ..., update_latency_ms_max: _Optional[float] = ..., uptime_s: _Optional[float] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("name", "step", "num_shards", "keep")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    NUM_SHARDS_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    name: str
    step: int
    num_shards: int
    keep: int
    def __init__(self, name: _Optional[str] = ..., step: _Optional[int] = ..., num_shards: _Optional[int] = ..., keep: _Optional[int] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("path", "variables")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    path: str
    variables: int
    def __init__(self, path: _Optional[str] = ..., variables: _Optional[int] = ...) -> None: ...

class DataFrame(_message.Message):
    __slots__ = ("id", "method", "shard", "body", "more", "code", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    method: str
    shard: int
    body: bytes
    more: bool
    code: int
    error: str
    def __init__(self, id: _Optional[int] = ..., method: _Optional[str] = ..., shard: _Optional[int] = ..., body: _Optional[bytes] = ..., more: _Optional[bool] = ..., code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("shard", "server", "address")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    server: int
    address: str
    def __init__(self, shard: _Optional[int] = ..., server: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CopyShardRequest(_message.Message):
    __slots__ = ("shard", "server", "address")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    server: int
    address: str
    def __init__(self, shard: _Optional[int] = ..., server: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class ShardPiece(_message.Message):
    __slots__ = ("data", "push_log")
    DATA_FIELD_NUMBER: _ClassVar[int]
    PUSH_LOG_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    push_log: str
    def __init__(self, data: _Optional[bytes] = ..., push_log: _Optional[str] = ...) -> None: ...

class RunClosureRequest(_message.Message):
    __slots__ = ("function", "args_json", "tensors")
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    function: str
    args_json: str
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, function: _Optional[str] = ..., args_json: _Optional[str] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class RunClosureResponse(_message.Message):
    __slots__ = ("result_json", "tensors", "error_type", "error_message", "error_traceback")
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    error_type: str
    error_message: str
    error_traceback: str
    def __init__(self, result_json: _Optional[str] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., error_traceback: _Optional[str] = ...) -> None: ...
