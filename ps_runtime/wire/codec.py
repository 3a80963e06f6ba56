"""Encode numpy arrays and closure arguments for the wire (never pickle)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ps_runtime.proto import ps_pb2


# Only plain numeric dtypes cross the wire; object arrays could smuggle arbitrary data.
def _little_endian_str(dtype: Any) -> str:
    return str(np.dtype(dtype).newbyteorder("<").str.replace("|", "<"))


ALLOWED_DTYPES = frozenset(
    _little_endian_str(t)
    for t in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
)

TENSOR_KEY = "__tensor__"
HANDLE_KEY = "__handle__"


def wire_dtype(dtype: Any) -> str:
    """Return the little-endian dtype string used on the wire, e.g. '<f4'."""
    dt = np.dtype(dtype)
    s = _little_endian_str(dt) if dt.kind in "biuf" else dt.str
    if s not in ALLOWED_DTYPES:
        raise TypeError(f"dtype {dt} cannot be sent; use a numeric or bool dtype")
    return s


def encode_tensor(array: Any) -> ps_pb2.Tensor:
    """Encode an array-like as a Tensor of raw little-endian bytes."""
    arr = np.asarray(array)
    dtype = wire_dtype(arr.dtype)
    arr = arr.astype(np.dtype(dtype), order="C", copy=False)  # keeps 0-d shapes
    return ps_pb2.Tensor(dtype=dtype, shape=list(arr.shape), data=arr.tobytes())


def decode_tensor(tensor: ps_pb2.Tensor) -> np.ndarray:
    """Decode a Tensor into a read-only numpy array viewing the message bytes."""
    if tensor.dtype.replace("|", "<") not in ALLOWED_DTYPES:
        raise ValueError(f"unsupported tensor dtype {tensor.dtype!r}")
    dtype = np.dtype(tensor.dtype)
    shape = tuple(tensor.shape)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(tensor.data) != expected:
        raise ValueError(
            f"tensor of shape {shape} and dtype {dtype} needs {expected} bytes, "
            f"got {len(tensor.data)}"
        )
    arr = np.frombuffer(tensor.data, dtype=dtype).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=False)


def decode_chunk_into(chunk: Any, flat: np.ndarray) -> int:
    """Copy one streamed chunk (a TensorChunk or `chunks.Chunk`) into the 1-D `flat`.

    Returns the number of elements copied.
    """
    itemsize = flat.dtype.itemsize
    if len(chunk.data) % itemsize:
        raise ValueError(
            f"chunk of {len(chunk.data)} bytes is not a whole number of {flat.dtype} elements"
        )
    n = len(chunk.data) // itemsize
    if chunk.offset < 0 or chunk.offset + n > flat.size:
        raise ValueError(
            f"chunk [{chunk.offset}, {chunk.offset + n}) lies outside a tensor "
            f"of {flat.size} elements"
        )
    if chunk.dtype and np.dtype(chunk.dtype) != flat.dtype:
        raise ValueError(f"chunk dtype {chunk.dtype} does not match {flat.dtype}")
    wire = flat.dtype.newbyteorder("<")
    flat[chunk.offset : chunk.offset + n] = np.frombuffer(chunk.data, dtype=wire)
    return n


def chunk_view(chunk: Any, dtype: np.dtype, size: int) -> np.ndarray:
    """A read-only 1-D array viewing one streamed chunk of a tensor of `size` elements."""
    itemsize = dtype.itemsize
    if len(chunk.data) % itemsize:
        raise ValueError(
            f"chunk of {len(chunk.data)} bytes is not a whole number of {dtype} elements"
        )
    n = len(chunk.data) // itemsize
    if chunk.offset < 0 or chunk.offset + n > size:
        raise ValueError(
            f"chunk [{chunk.offset}, {chunk.offset + n}) lies outside a tensor of {size} elements"
        )
    if chunk.dtype and np.dtype(chunk.dtype) != dtype:
        raise ValueError(f"chunk dtype {chunk.dtype} does not match {dtype}")
    return np.frombuffer(chunk.data, dtype=dtype.newbyteorder("<"))


def encode_value(value: Any) -> tuple[str, list[ps_pb2.Tensor]]:
    """Encode a JSON-like value whose leaves may be numpy arrays or handles.

    Handles are objects with a `to_wire()` method returning a JSON dict; they are
    rebuilt on the receiving side by `decode_value(..., resolve_handle=...)`. Any
    `Mapping` with str keys (e.g. a collection of handles such as
    `ps_runtime.pytorch.PSParameters`) travels as a JSON object and arrives as a dict.
    """
    tensors: list[ps_pb2.Tensor] = []

    def walk(v: Any) -> Any:
        if v is None or isinstance(v, bool | int | float | str):
            return v
        if isinstance(v, np.ndarray):
            tensors.append(encode_tensor(v))
            return {TENSOR_KEY: len(tensors) - 1}
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, Mapping):
            out = {}
            for k, item in v.items():
                if not isinstance(k, str):
                    raise TypeError(f"dict keys must be str to be sent, got {k!r}")
                out[k] = walk(item)
            return out
        if isinstance(v, list | tuple):
            return [walk(item) for item in v]
        to_wire = getattr(v, "to_wire", None)
        if callable(to_wire):
            return {HANDLE_KEY: to_wire()}
        raise TypeError(
            f"cannot send {type(v).__name__} to a worker: use JSON values, numpy arrays, "
            "variables or per-worker resources (no pickle)"
        )

    return json.dumps(walk(value), allow_nan=True), tensors


def decode_value(
    text: str,
    tensors: Any,
    resolve_handle: Callable[[dict[str, Any]], Any] | None = None,
) -> Any:
    """Decode what `encode_value` produced; handles go through `resolve_handle`."""
    arrays = [decode_tensor(t) for t in tensors]

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(item) for item in v]
        if isinstance(v, dict):
            if len(v) == 1 and TENSOR_KEY in v:
                return arrays[int(v[TENSOR_KEY])]
            if len(v) == 1 and HANDLE_KEY in v:
                if resolve_handle is None:
                    raise ValueError("received a handle where none was expected")
                return resolve_handle(v[HANDLE_KEY])
            return {k: walk(item) for k, item in v.items()}
        return v

    return walk(json.loads(text)) if text else None


def encode_spec(name: str, params: dict[str, float] | None = None) -> ps_pb2.Spec:
    """Build a Spec message from a name and numeric parameters."""
    return ps_pb2.Spec(name=name, params={k: float(v) for k, v in (params or {}).items()})
