"""How the answers of data calls land: in the caller's buffer, copied once from gRPC's.

Each is an `Answer` of `streams`, run on the data stream's reader thread as an answer
frame arrives, so a pulled value is in place when its call completes.
"""

from __future__ import annotations

import numpy as np

from ps_runtime.client.streams import Answer
from ps_runtime.proto import ps_pb2
from ps_runtime.wire import chunks
from ps_runtime.wire.codec import decode_chunk_into
from ps_runtime.wire.frames import tensor_view


def push_reply(body: memoryview, last: bool) -> ps_pb2.PushResponse:
    reply: ps_pb2.PushResponse = ps_pb2.PushResponse.FromString(body)
    return reply


def value_into(value: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """`value` (a view of gRPC's buffer) as the result: copied into `out` when given."""
    if out is None:
        return value
    out[...] = value
    return out


def rows_into(out: np.ndarray, pos: np.ndarray) -> Answer:
    """An answer that copies pulled rows straight into their places in `out`."""

    def answer(body: memoryview, last: bool) -> None:
        out[pos] = tensor_view(body)

    return answer


class Assembly:
    """A chunked pull's answer: each chunk copied into `out` (allocated at the first
    when not given) as it arrives; a pull tried again starts afresh."""

    def __init__(self, name: str, out: np.ndarray | None) -> None:
        self._name = name
        self._given = self._out = out
        self._flat: np.ndarray | None = None
        self._filled = 0

    def __call__(self, body: memoryview, last: bool) -> np.ndarray | None:
        chunk = chunks.decode_chunk(body)
        if self._flat is None or chunk.dtype:  # the first chunk (of this attempt)
            self._filled = 0
            shape = tuple(chunk.shape)
            dtype = np.dtype(chunk.dtype).newbyteorder("=")
            out = self._out = self._given
            if out is None:
                out = self._out = np.empty(shape, dtype=dtype)
            elif out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
                raise ValueError(
                    f"out must be a C-contiguous {dtype} array of shape "
                    f"{shape}, got {out.dtype} {out.shape}"
                )
            self._flat = out.reshape(-1)
        self._filled += decode_chunk_into(chunk, self._flat)
        if not last:
            return None
        if self._filled != self._flat.size:
            raise RuntimeError(f"pull stream of {self._name!r} ended after {self._filled} elements")
        return self._out
