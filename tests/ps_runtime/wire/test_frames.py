"""The data stream's frames: byte-compatible with the generated class, bodies not copied."""

from __future__ import annotations

import numpy as np

from ps_runtime.proto import ps_pb2
from ps_runtime.wire.codec import encode_tensor
from ps_runtime.wire.frames import decode_frame, encode_frame, tensor_parts, tensor_view


def test_frames_match_the_generated_message() -> None:
    data = np.arange(5, dtype=np.float32)
    encoded = encode_frame(
        7, [b"head", data.data], method="PullRows", shard=2, more=True, code=5, error="gone"
    )
    parsed = ps_pb2.DataFrame.FromString(encoded)
    assert (parsed.id, parsed.method, parsed.shard, parsed.more) == (7, "PullRows", 2, True)
    assert (parsed.code, parsed.error) == (5, "gone")
    assert parsed.body == b"head" + data.tobytes()
    frame = decode_frame(parsed.SerializeToString())
    assert (frame.id, frame.method, frame.shard, frame.more) == (7, "PullRows", 2, True)
    assert (frame.code, frame.error, bytes(frame.body)) == (5, "gone", parsed.body)
    assert decode_frame(encode_frame(1)) == decode_frame(ps_pb2.DataFrame(id=1).SerializeToString())


def test_a_tensor_body_is_viewed_not_copied() -> None:
    for array in (np.arange(12, dtype=np.int64).reshape(3, 4), np.array(2.5), np.zeros((0, 3))):
        message = encode_frame(3, tensor_parts(array))
        assert ps_pb2.Tensor.FromString(ps_pb2.DataFrame.FromString(message).body) == (
            encode_tensor(array)
        )
        frame = decode_frame(message)
        value = tensor_view(frame.body)
        np.testing.assert_array_equal(value, array)
        assert value.shape == array.shape
        if array.size:
            assert np.shares_memory(value, np.frombuffer(message, np.uint8))
