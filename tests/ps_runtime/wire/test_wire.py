"""Tensor and closure-argument encoding round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ps_runtime.proto import ps_pb2
from ps_runtime.wire import chunks
from ps_runtime.wire.codec import (
    decode_chunk_into,
    decode_tensor,
    decode_value,
    encode_tensor,
    encode_value,
)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8", "bool"])
def test_tensor_round_trip(dtype: str) -> None:
    arr = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    back = decode_tensor(ps_pb2.Tensor.FromString(encode_tensor(arr).SerializeToString()))
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


def test_tensor_is_raw_little_endian_bytes() -> None:
    big = np.array([1.5, -2.0], dtype=">f8")
    t = encode_tensor(big)
    assert t.dtype == "<f8" and list(t.shape) == [2]
    assert t.data == np.array([1.5, -2.0], dtype="<f8").tobytes()
    np.testing.assert_array_equal(decode_tensor(t), [1.5, -2.0])


def test_non_contiguous_and_scalar_tensors() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    np.testing.assert_array_equal(decode_tensor(encode_tensor(arr)), arr)
    assert decode_tensor(encode_tensor(np.float32(3.0))).shape == ()


def test_bad_tensors_are_rejected() -> None:
    with pytest.raises(TypeError, match="cannot be sent"):
        encode_tensor(np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="needs 16 bytes"):
        decode_tensor(ps_pb2.Tensor(dtype="<f8", shape=[2], data=b"\0" * 8))
    with pytest.raises(ValueError, match="unsupported"):
        decode_tensor(ps_pb2.Tensor(dtype="|O", shape=[1], data=b"\0" * 8))


class _Handle:
    def to_wire(self) -> dict[str, str]:
        return {"kind": "fake", "name": "h"}


def test_value_round_trip_with_arrays_and_handles() -> None:
    value = {
        "args": [1, "x", (2.5, None), np.ones((2, 2), np.float32), _Handle()],
        "kwargs": {"n": np.int64(7), "nested": {"a": np.arange(3)}},
    }
    text, tensors = encode_value(value)
    json.loads(text)  # plain JSON, no pickle
    assert len(tensors) == 2
    back = decode_value(text, tensors, resolve_handle=lambda d: ("handle", d["name"]))
    assert back["args"][:3] == [1, "x", [2.5, None]]
    np.testing.assert_array_equal(back["args"][3], np.ones((2, 2)))
    assert back["args"][4] == ("handle", "h")
    assert back["kwargs"]["n"] == 7
    np.testing.assert_array_equal(back["kwargs"]["nested"]["a"], [0, 1, 2])


def test_unsupported_values_say_what_is_allowed() -> None:
    with pytest.raises(TypeError, match="no pickle"):
        encode_value({"x": {1, 2}})


def test_hand_encoded_chunks_match_the_generated_messages() -> None:
    data = np.arange(10, dtype="<f4")
    raw = chunks.encode_chunk(data, 5, "<f4", (2, 5))
    msg = ps_pb2.TensorChunk.FromString(raw)
    assert (msg.dtype, list(msg.shape), msg.offset) == ("<f4", [2, 5], 5)
    assert msg.data == data.tobytes()
    back = chunks.decode_chunk(msg.SerializeToString())
    assert (back.dtype, back.shape, back.offset) == ("<f4", [2, 5], 5)
    assert bytes(back.data) == data.tobytes()
    origin = ps_pb2.PushOrigin(worker="w", incarnation=-1, sequence=3)
    push = ps_pb2.PushDenseChunk.FromString(chunks.encode_push_chunk(data, 0, "v", origin))
    assert push.name == "v" and push.origin == origin and push.chunk.data == data.tobytes()
    decoded = chunks.decode_push_chunk(push.SerializeToString())
    assert decoded.name == "v" and decoded.origin == origin
    flat = np.zeros(10, np.float32)
    assert decode_chunk_into(decoded.chunk, flat) == 10
    np.testing.assert_array_equal(flat, data)
    with pytest.raises(ValueError, match="truncated"):
        chunks.decode_chunk(raw[:-3])
