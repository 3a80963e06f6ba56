"""Zero-copy protobuf codec for the streamed dense-tensor messages (the bulk data path).

`TensorChunk` and `PushDenseChunk` (see ps.proto) are encoded and decoded by hand here,
byte-compatible with the generated classes, because the generic path costs three
copies per chunk on the sending side (ndarray -> bytes -> message -> serialized) and
two on the receiving side. Here a sent chunk is one copy (the numpy slice joined
behind a few header bytes) and a received chunk is a memoryview into gRPC's buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ps_runtime.proto import ps_pb2
from ps_runtime.wire.codec import wire_dtype


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s are ten-byte varints
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint in a tensor chunk")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long in a tensor chunk")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


@dataclass
class Chunk:
    """A decoded TensorChunk; `data` views the received message bytes."""

    offset: int = 0
    dtype: str = ""
    shape: list[int] = field(default_factory=list)
    data: memoryview = field(default_factory=lambda: memoryview(b""))


@dataclass
class PushChunk:
    """A decoded PushDenseChunk."""

    name: str = ""
    origin: ps_pb2.PushOrigin = field(default_factory=ps_pb2.PushOrigin)
    chunk: Chunk = field(default_factory=Chunk)


# How a server wraps one pulled chunk: (chunk header, data, is the last) -> the message.
Wrap = Callable[[bytes, memoryview, bool], bytes]


def chunk_header(
    offset: int, data_len: int, dtype: str = "", shape: tuple[int, ...] | list[int] = ()
) -> bytes:
    head = b""
    if dtype:
        head += _field(1, dtype.encode())
        head += _field(2, b"".join(_varint(int(s)) for s in shape))
    if offset:
        head += _varint(3 << 3) + _varint(offset)
    return head + _varint(4 << 3 | 2) + _varint(data_len)


def encode_chunk(
    data: np.ndarray, offset: int, dtype: str = "", shape: tuple[int, ...] | list[int] = ()
) -> bytes:
    """Serialized TensorChunk holding the contiguous 1-D array `data` (one copy)."""
    view = data.data.cast("B")
    return b"".join((chunk_header(offset, len(view), dtype, shape), view))


def encode_push_chunk(
    data: np.ndarray,
    offset: int,
    name: str = "",
    origin: ps_pb2.PushOrigin | None = None,
    dtype: str = "",
    shape: tuple[int, ...] | list[int] = (),
) -> bytes:
    """Serialized PushDenseChunk: name and origin (first message only) plus one chunk."""
    return b"".join(push_chunk_parts(data, offset, name, origin, dtype, shape))


def push_chunk_parts(
    data: np.ndarray,
    offset: int,
    name: str = "",
    origin: ps_pb2.PushOrigin | None = None,
    dtype: str = "",
    shape: tuple[int, ...] | list[int] = (),
) -> tuple[bytes, memoryview]:
    """A PushDenseChunk as (header, data view): joined, they are `encode_push_chunk`'s."""
    view = data.data.cast("B")
    inner = chunk_header(offset, len(view), dtype, shape)
    head = b""
    if name:
        head += _field(1, name.encode())
    if origin is not None:
        head += _field(2, origin.SerializeToString())
    head += _varint(3 << 3 | 2) + _varint(len(inner) + len(view)) + inner
    return head, view


def _fields(buf: memoryview) -> list[tuple[int, int | memoryview]]:
    out: list[tuple[int, int | memoryview]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field in a tensor chunk")
            out.append((number, buf[pos : pos + length]))
            pos += length
        else:
            raise ValueError(f"unexpected wire type {wire} in a tensor chunk")
    return out


def _decode_chunk_view(buf: memoryview) -> Chunk:
    chunk = Chunk()
    for number, value in _fields(buf):
        if number == 1 and isinstance(value, memoryview):
            chunk.dtype = bytes(value).decode()
        elif number == 2 and isinstance(value, memoryview):
            pos, shape = 0, []
            while pos < len(value):
                dim, pos = _read_varint(value, pos)
                shape.append(_signed(dim))
            chunk.shape = shape
        elif number == 2 and isinstance(value, int):  # unpacked repeated
            chunk.shape.append(_signed(value))
        elif number == 3 and isinstance(value, int):
            chunk.offset = _signed(value)
        elif number == 4 and isinstance(value, memoryview):
            chunk.data = value
    return chunk


def decode_chunk(message: bytes | memoryview) -> Chunk:
    """Parse a serialized TensorChunk without copying its data."""
    return _decode_chunk_view(memoryview(message))


def decode_push_chunk(message: bytes | memoryview) -> PushChunk:
    """Parse a serialized PushDenseChunk without copying its data."""
    out = PushChunk()
    for number, value in _fields(memoryview(message)):
        if not isinstance(value, memoryview):
            continue
        if number == 1:
            out.name = bytes(value).decode()
        elif number == 2:
            out.origin = ps_pb2.PushOrigin.FromString(bytes(value))
        elif number == 3:
            out.chunk = _decode_chunk_view(value)
    return out


def push_messages(
    name: str, origin: ps_pb2.PushOrigin, grad: np.ndarray, chunk_bytes: int
) -> Iterator[bytes]:
    """A dense gradient as serialized PushDenseChunks of about `chunk_bytes` each."""
    return (b"".join(parts) for parts in push_pieces(name, origin, grad, chunk_bytes))


def push_pieces(
    name: str, origin: ps_pb2.PushOrigin, grad: np.ndarray, chunk_bytes: int
) -> Iterator[tuple[bytes, memoryview]]:
    """`push_messages` as `push_chunk_parts`, each still to be joined (its one copy)."""
    flat = grad.reshape(-1)
    dtype = wire_dtype(flat.dtype)
    if flat.dtype.str != dtype:
        flat = flat.astype(dtype)
    step = max(1, chunk_bytes // flat.dtype.itemsize)
    for start in range(0, max(flat.size, 1), step):
        piece = flat[start : start + step]
        if start == 0:
            yield push_chunk_parts(piece, 0, name, origin, dtype, grad.shape)
        else:
            yield push_chunk_parts(piece, start)
