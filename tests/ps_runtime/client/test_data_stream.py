"""The data calls on one stream per server: tagged requests, answered out of order,
many in flight, an error failing one request only, a broken stream failing those in
flight (and the next call opening a new one), pulls landing in the caller's buffer."""

from __future__ import annotations

import collections
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np
import pytest

from ps_runtime.client.answers import Assembly
from ps_runtime.client.client import PSClient
from ps_runtime.client.streams import StreamError
from ps_runtime.launch.local import free_ports
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.server.replication import ReplicaSet
from ps_runtime.server.servicer import ParameterServerServicer, add_servicer, create_ps_server
from ps_runtime.server.store import ParameterStore
from ps_runtime.wire import chunks, rpc
from tests.ps_runtime.server.test_replication import TOKEN, Servers

MIB = 1 << 20
SGD = ("sgd", {"learning_rate": 1.0})


class _Counting(grpc.ServerInterceptor):
    """Counts the RPCs a server receives, by method."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    def intercept_service(
        self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails
    ) -> Any:
        self.calls[str(details.method).rsplit("/", 1)[-1]] += 1
        return continuation(details)


class _Served:
    """An in-process PS server (its store at hand) and a client of it."""

    def __init__(self) -> None:
        self.counting = _Counting()
        self.servicer = ParameterServerServicer(ReplicaSet.alone(0, TOKEN))
        self.server = grpc.server(
            ThreadPoolExecutor(16),
            interceptors=[rpc.BearerAuthInterceptor(TOKEN), self.counting],
            options=rpc.GRPC_OPTIONS,
        )
        add_servicer(self.servicer, self.server, data_workers=3)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()
        self.client = PSClient([self.address], TOKEN, timeout=5)

    @property
    def store(self) -> ParameterStore:
        return self.servicer.replicas.shards[0].store

    def unary(self) -> Any:
        """A plain stub on a channel of its own, to compare with the unary calls."""
        return ps_pb2_grpc.ParameterServerStub(grpc.insecure_channel(self.address))

    def close(self) -> None:
        self.client.close()
        self.server.stop(0)


@pytest.fixture
def served() -> Iterator[_Served]:
    s = _Served()
    try:
        yield s
    finally:
        s.close()


def _constant(value: float) -> tuple[str, dict[str, float]]:
    return ("constant", {"value": value})


def test_an_answer_ready_first_comes_back_first(served: _Served) -> None:
    client = served.client
    client.create_variable(0, "slow", (4,), np.float32, _constant(1.0), SGD)
    client.create_variable(0, "fast", (4,), np.float32, _constant(2.0), SGD)
    with served.store.dense("slow").lock:  # the server cannot answer "slow" meanwhile
        slow = client.pull_dense_async(0, "slow")
        fast = client.pull_dense_async(0, "fast")
        np.testing.assert_array_equal(fast.result(), np.full(4, 2.0))
    np.testing.assert_array_equal(slow.result(), np.full(4, 1.0))
    assert served.counting.calls["DataStream"] == 1
    assert served.counting.calls["PullDense"] == 0


def test_many_requests_in_flight_on_one_stream(served: _Served) -> None:
    client = served.client
    for t in range(4):
        client.create_table(f"t{t}", 3, np.float32, _constant(0.0), SGD)
    ids = [np.arange(i * 10, i * 10 + 10, dtype=np.int64) for i in range(50)]
    grads = [np.full((10, 3), -float(i), np.float32) for i in range(50)]
    pushes = [client.push_rows_async(f"t{i % 4}", ids[i], grads[i], unique=True) for i in range(50)]
    for push in pushes:
        push.result()
    pulls = [client.pull_rows_async(f"t{i % 4}", ids[i], 3, np.float32) for i in range(50)]
    for i, pull in enumerate(pulls):
        np.testing.assert_array_equal(pull.result(), np.full((10, 3), float(i)))
    assert served.counting.calls["DataStream"] == 1
    assert served.counting.calls["PullRows"] == served.counting.calls["PushRowGrads"] == 0


def test_an_error_fails_its_request_only_as_the_unary_call_did(served: _Served) -> None:
    client = served.client
    client.create_variable(0, "w", (4,), np.float32, _constant(3.0), SGD)
    client.create_variable(0, "big", (MIB,), np.float32, _constant(0.0), SGD)
    auth = rpc.auth_metadata(TOKEN)
    with pytest.raises(grpc.RpcError) as unary:
        served.unary().PullDense(ps_pb2.PullDenseRequest(name="missing"), metadata=auth)
    bad = np.ones(MIB // 2, np.float32)
    with pytest.raises(grpc.RpcError) as unary_push:
        served.unary().PushDenseStream(
            iter(
                [
                    ps_pb2.PushDenseChunk.FromString(m)
                    for m in chunks.push_messages("big", client._origin(), bad, 1024)
                ]
            ),
            metadata=auth,
        )
    with served.store.dense("w").lock:  # a good request stays in flight meanwhile
        good = client.pull_dense_async(0, "w")
        with pytest.raises(grpc.RpcError) as streamed:
            client.pull_dense(0, "missing")
        client.chunk_bytes = 1024
        with pytest.raises(grpc.RpcError) as streamed_push:
            client.push_dense(0, "big", bad)
    assert streamed.value.code() == unary.value.code() == grpc.StatusCode.NOT_FOUND
    assert streamed.value.details() == unary.value.details()
    assert streamed_push.value.code() == unary_push.value.code()
    assert streamed_push.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert streamed_push.value.details() == unary_push.value.details()
    np.testing.assert_array_equal(good.result(), np.full(4, 3.0))
    assert client.pull_dense(0, "w")[0] == 3.0
    assert served.counting.calls["DataStream"] == 1  # the stream outlived the errors


def test_a_pull_lands_in_the_callers_buffer(served: _Served) -> None:
    client = served.client
    client.chunk_bytes = MIB
    n = 12 * MIB  # 48 MiB of float32, pulled in 1 MiB chunks
    client.create_variable(0, "big", (n // 1024, 1024), np.float32, _constant(2.0), SGD)
    client.create_variable(0, "small", (2, 3), np.float32, _constant(5.0), SGD)
    buffer = np.zeros((n // 1024, 1024), np.float32)
    small = np.zeros((2, 3), np.float32)
    client.pull_dense(0, "big", buffer.nbytes, buffer)  # warm: the stream is open
    buffer[:] = 0
    tracemalloc.start()
    try:
        got = client.pull_dense(0, "big", buffer.nbytes, buffer)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got is buffer
    assert np.all(buffer == 2.0)
    # Chunks go straight into the buffer: no array of the value's size on the way.
    assert peak < buffer.nbytes // 2
    assert client.pull_dense(0, "small", small.nbytes, small) is small
    np.testing.assert_array_equal(small, np.full((2, 3), 5.0))


def test_a_broken_stream_fails_its_requests_and_the_next_call_reopens_it() -> None:
    servers = Servers(1, 0)
    client = PSClient(servers.addresses, TOKEN, timeout=20, chunk_bytes=MIB)
    try:
        client.create_variable(0, "big", (8 * MIB,), np.float32, _constant(1.0), SGD)
        stream = client._routes.servers[0].data
        first, killed = threading.Event(), threading.Event()

        def hold(body: memoryview, last: bool) -> None:
            first.set()
            killed.wait(10)  # the reader stalls with the rest of the pull on its way

        request = ps_pb2.PullDenseRequest(name="big", chunk_bytes=MIB)
        call = stream.start("PullDenseStream", 0, [request.SerializeToString()], hold, 20)
        assert first.wait(10)
        servers.kill(0)
        killed.set()
        with pytest.raises(StreamError) as info:
            call.result()
        assert info.value.code() in rpc.SERVER_GONE
        assert "data stream to the parameter server" in info.value.details()
        servers.start(0)
        servers.wait_serving(0)
        client.create_variable(0, "w", (3,), np.float32, _constant(4.0), SGD)
        np.testing.assert_array_equal(client.pull_dense(0, "w"), np.full(3, 4.0))
        servers.kill(0)  # back at another address (a move): the client follows
        servers.addresses[0] = f"127.0.0.1:{free_ports(1)[0]}"
        servers.start(0)
        servers.wait_serving(0)
        client.move(servers.addresses)
        client.create_variable(0, "w", (3,), np.float32, _constant(6.0), SGD)
        np.testing.assert_array_equal(client.pull_dense(0, "w"), np.full(3, 6.0))
    finally:
        client.close()
        servers.stop()


def test_a_stopping_server_ends_its_streams_without_waiting_out_its_grace() -> None:
    server, port = create_ps_server(token=TOKEN)
    client = PSClient([f"127.0.0.1:{port}"], TOKEN, timeout=5)
    try:
        client.create_variable(0, "w", (3,), np.float32, _constant(1.0), SGD)
        np.testing.assert_array_equal(client.pull_dense(0, "w"), np.ones(3))  # stream open
        started = time.monotonic()
        assert server.stop(10).wait(10)
        assert time.monotonic() - started < 3.0  # not the 10 s grace: the stream ended
        with pytest.raises(grpc.RpcError) as info:
            client.pull_dense(0, "w")
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        client.close()


def test_a_chunked_pull_that_ends_short_fails() -> None:
    value = np.arange(8, dtype=np.float32)
    first = chunks.encode_chunk(value[:4], 0, "<f4", (8,))
    assembly = Assembly("v", None)
    assert assembly(memoryview(first), False) is None
    with pytest.raises(RuntimeError, match="ended after 6 elements"):
        assembly(memoryview(chunks.encode_chunk(value[4:6], 4)), True)
    whole = chunks.encode_chunk(value, 0, "<f4", (8,))
    np.testing.assert_array_equal(assembly(memoryview(whole), True), value)  # tried again
