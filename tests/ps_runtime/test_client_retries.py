"""A PS client without replication rides out a server that does not answer for a moment
(still starting, or too loaded to finish the connection): pulls, like pushes, are tried
again on the same server before the call fails."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np
import pytest

from ps_runtime.client.client import PSClient
from tests.ps_runtime.server.test_replication import TOKEN, Servers


class _FlakyProxy(grpc.GenericRpcHandler):
    """Forwards every call to `target`, except that the next `failures` calls (a data
    stream counts as one) answer UNAVAILABLE, as a server that cannot be reached does."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target)
        self.failures = 0
        self.lock = threading.Lock()

    def _fail(self, context: grpc.ServicerContext) -> None:
        with self.lock:
            fail, self.failures = self.failures > 0, max(0, self.failures - 1)
        if fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection attempt timed out")

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        method = str(details.method)
        if method.endswith("/DataStream"):

            def relay(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
                self._fail(context)
                call = self.channel.stream_stream(method)
                yield from call(requests, metadata=context.invocation_metadata())

            return grpc.stream_stream_rpc_method_handler(relay)
        if method.endswith("Stream"):
            return None  # the test's calls are small

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._fail(context)
            call = self.channel.unary_unary(method)
            reply: bytes = call(request, metadata=context.invocation_metadata(), timeout=30)
            return reply

        return grpc.unary_unary_rpc_method_handler(forward)


@pytest.fixture
def proxied() -> Any:
    servers = Servers(1, 0)
    proxy = _FlakyProxy(servers.addresses[0])
    server = grpc.server(ThreadPoolExecutor(4), handlers=[proxy])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = PSClient([f"127.0.0.1:{port}"], TOKEN, timeout=30)
    try:
        yield client, proxy
    finally:
        client.close()
        server.stop(0)
        proxy.channel.close()
        servers.stop()


def test_pulls_are_tried_again_when_the_server_does_not_answer(proxied: Any) -> None:
    client, proxy = proxied
    sgd = ("sgd", {"learning_rate": 1.0})
    client.create_table("emb", 4, np.float32, ("zeros", {}), sgd)
    client.create_variable(0, "w", (8,), np.float32, ("zeros", {}), sgd)
    ids = np.arange(10, dtype=np.int64)
    proxy.failures = 2
    assert client.pull_rows("emb", ids, 4, np.float32).shape == (10, 4)
    proxy.failures = 2
    assert client.pull_dense(0, "w").shape == (8,)
    proxy.failures = 2
    assert client.pull_dense_async(0, "w").result().shape == (8,)
    proxy.failures = 2  # pushes, as before
    client.push_rows("emb", ids, np.ones((10, 4), np.float32))
    assert np.all(client.pull_rows("emb", ids, 4, np.float32) == -1.0)


def test_a_server_that_never_answers_fails_the_pull(proxied: Any) -> None:
    client, proxy = proxied
    client.create_table("emb", 4, np.float32, ("zeros", {}), ("sgd", {"learning_rate": 1.0}))
    proxy.failures = 100
    with pytest.raises(grpc.RpcError) as failed:
        client.pull_rows("emb", np.arange(3, dtype=np.int64), 4, np.float32)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
