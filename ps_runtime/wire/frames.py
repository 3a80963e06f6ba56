"""Zero-copy codec for the `DataFrame`s of the data stream (see ps.proto).

A frame wraps one request or answer of a multiplexed data call. Encoding joins the
header fields and the body's pieces (a chunk header and a numpy slice, say) in one
copy; decoding gives the body as a memoryview into gRPC's buffer, so a pulled tensor
is copied once, from there into the caller's array. Byte-compatible with the
generated `ps_pb2.DataFrame`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ps_runtime.wire.chunks import _fields, _read_varint, _signed, _varint
from ps_runtime.wire.codec import ALLOWED_DTYPES, wire_dtype

Buffer = bytes | memoryview


@dataclass
class Frame:
    """A decoded DataFrame; `body` views the received message bytes."""

    id: int = 0
    method: str = ""
    shard: int = 0
    body: memoryview = field(default_factory=lambda: memoryview(b""))
    more: bool = False
    code: int = 0
    error: str = ""


def _len_field(number: int, length: int) -> bytes:
    return _varint(number << 3 | 2) + _varint(length)


def encode_frame(
    id: int,
    body: Sequence[Buffer] = (),
    *,
    method: str = "",
    shard: int = 0,
    more: bool = False,
    code: int = 0,
    error: str = "",
) -> bytes:
    """Serialized DataFrame whose body is the concatenation of `body` (one copy)."""
    head = _varint(1 << 3) + _varint(id)
    if method:
        encoded = method.encode()
        head += _len_field(2, len(encoded)) + encoded
    if shard:
        head += _varint(3 << 3) + _varint(shard)
    views = [memoryview(b).cast("B") for b in body]
    size = sum(len(v) for v in views)
    if size:
        head += _len_field(4, size)
    tail = b""
    if more:
        tail += _varint(5 << 3) + _varint(1)
    if code:
        tail += _varint(6 << 3) + _varint(code)
    if error:
        encoded = error.encode()
        tail += _len_field(7, len(encoded)) + encoded
    return b"".join((head, *views, tail)) if size else head + tail


def decode_frame(message: bytes) -> Frame:
    """Parse a serialized DataFrame without copying its body."""
    frame = Frame()
    for number, value in _fields(memoryview(message)):
        if isinstance(value, int):
            if number == 1:
                frame.id = value
            elif number == 3:
                frame.shard = _signed(value)
            elif number == 5:
                frame.more = bool(value)
            elif number == 6:
                frame.code = _signed(value)
        elif number == 2:
            frame.method = bytes(value).decode()
        elif number == 4:
            frame.body = value
        elif number == 7:
            frame.error = bytes(value).decode()
    return frame


def tensor_view(message: memoryview) -> np.ndarray:
    """A read-only array viewing a serialized `Tensor` (no copy on a little-endian host)."""
    dtype, shape, data = "", [], memoryview(b"")
    for number, value in _fields(message):
        if number == 1 and isinstance(value, memoryview):
            dtype = bytes(value).decode()
        elif number == 2 and isinstance(value, memoryview):
            pos = 0
            while pos < len(value):
                dim, pos = _read_varint(value, pos)
                shape.append(_signed(dim))
        elif number == 2 and isinstance(value, int):
            shape.append(_signed(value))
        elif number == 3 and isinstance(value, memoryview):
            data = value
    if dtype.replace("|", "<") not in ALLOWED_DTYPES:
        raise ValueError(f"unsupported tensor dtype {dtype!r}")
    wire = np.dtype(dtype)
    expected = int(np.prod(shape, dtype=np.int64)) * wire.itemsize
    if len(data) != expected:
        raise ValueError(
            f"tensor of shape {tuple(shape)} and dtype {wire} needs {expected} bytes, "
            f"got {len(data)}"
        )
    return np.frombuffer(data, dtype=wire).reshape(shape).astype(wire.newbyteorder("="), copy=False)


def tensor_parts(array: np.ndarray) -> list[Buffer]:
    """A serialized `Tensor` of `array` as pieces for `encode_frame` (no copy yet)."""
    dtype = wire_dtype(array.dtype)
    array = array.astype(np.dtype(dtype), order="C", copy=False)  # keeps 0-d shapes
    view = array.data.cast("B") if array.size else memoryview(b"")
    shape = b"".join(_varint(int(s)) for s in array.shape)
    head = _len_field(1, len(dtype)) + dtype.encode()
    if shape:
        head += _len_field(2, len(shape)) + shape
    if len(view):
        head += _len_field(3, len(view))
    return [head, view]


def push_frames(id: int, shard: int, pieces: Iterator[tuple[bytes, memoryview]]) -> Iterator[bytes]:
    """A chunked push (`chunks.push_pieces`) as the frames of request `id`: the first
    names the method, all but the last say more follow."""
    method, last = "PushDenseStream", next(pieces)
    for parts in pieces:
        yield encode_frame(id, last, method=method, shard=shard, more=True)
        method, last = "", parts
    yield encode_frame(id, last, method=method, shard=shard)
