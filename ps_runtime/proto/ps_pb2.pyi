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

class CreateVariableRequest(_message.Message):
    __slots__ = ("name", "shape", "dtype", "initializer", "optimizer", "initial_value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZER_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    INITIAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    initializer: Spec
    optimizer: Spec
    initial_value: Tensor
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., initializer: _Optional[_Union[Spec, _Mapping]] = ..., optimizer: _Optional[_Union[Spec, _Mapping]] = ..., initial_value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class CreateTableRequest(_message.Message):
    __slots__ = ("name", "dim", "dtype", "initializer", "optimizer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZER_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    name: str
    dim: int
    dtype: str
    initializer: Spec
    optimizer: Spec
    def __init__(self, name: _Optional[str] = ..., dim: _Optional[int] = ..., dtype: _Optional[str] = ..., initializer: _Optional[_Union[Spec, _Mapping]] = ..., optimizer: _Optional[_Union[Spec, _Mapping]] = ...) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("created",)
    CREATED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    def __init__(self, created: _Optional[bool] = ...) -> None: ...

class PullDenseRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PushDenseRequest(_message.Message):
    __slots__ = ("name", "grad")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRAD_FIELD_NUMBER: _ClassVar[int]
    name: str
    grad: Tensor
    def __init__(self, name: _Optional[str] = ..., grad: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class PullRowsRequest(_message.Message):
    __slots__ = ("name", "ids")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ids: Tensor
    def __init__(self, name: _Optional[str] = ..., ids: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class PushRowsRequest(_message.Message):
    __slots__ = ("name", "ids", "grads")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    GRADS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ids: Tensor
    grads: Tensor
    def __init__(self, name: _Optional[str] = ..., ids: _Optional[_Union[Tensor, _Mapping]] = ..., grads: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class PushResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VariableStats(_message.Message):
    __slots__ = ("name", "kind", "shape", "bytes", "pulls", "pushes", "optimizer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PULLS_FIELD_NUMBER: _ClassVar[int]
    PUSHES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    bytes: int
    pulls: int
    pushes: int
    optimizer: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., bytes: _Optional[int] = ..., pulls: _Optional[int] = ..., pushes: _Optional[int] = ..., optimizer: _Optional[str] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("shard_index", "variables")
    SHARD_INDEX_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    shard_index: int
    variables: _containers.RepeatedCompositeFieldContainer[VariableStats]
    def __init__(self, shard_index: _Optional[int] = ..., variables: _Optional[_Iterable[_Union[VariableStats, _Mapping]]] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("path", "variables")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    path: str
    variables: int
    def __init__(self, path: _Optional[str] = ..., variables: _Optional[int] = ...) -> None: ...

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
