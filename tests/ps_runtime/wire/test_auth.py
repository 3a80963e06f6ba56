"""Every runtime RPC needs `authorization: Bearer <job token>`."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ps_runtime.coordinator.worker_server import create_worker_server
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.server.servicer import create_ps_server
from ps_runtime.wire import rpc

TOKEN = "s3cret-token"


@pytest.fixture(params=["ps", "worker"])
def address(request: pytest.FixtureRequest) -> Iterator[str]:
    create = create_ps_server if request.param == "ps" else create_worker_server
    server, port = create("127.0.0.1:0", token=TOKEN)
    yield f"127.0.0.1:{port}"
    server.stop(None)


def _call(address: str, metadata: tuple[tuple[str, str], ...] | None) -> None:
    with rpc.create_channel(address) as channel:
        health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), metadata=metadata, timeout=5
        )


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        (("authorization", "Bearer wrong"),),
        (("authorization", TOKEN),),
        (("x-other", f"Bearer {TOKEN}"),),
    ],
)
def test_bad_or_missing_token_is_unauthenticated(address: str, metadata: object) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _call(address, metadata)  # type: ignore[arg-type]
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_right_token_passes(address: str) -> None:
    _call(address, rpc.auth_metadata(TOKEN))
    assert rpc.check_health(address, TOKEN)
    assert not rpc.check_health(address, "nope")


def test_ps_methods_are_protected() -> None:
    server, port = create_ps_server(token=TOKEN)
    try:
        with rpc.create_channel(f"127.0.0.1:{port}") as channel:
            stub = ps_pb2_grpc.ParameterServerStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.Stats(ps_pb2.StatsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            reply = stub.Stats(ps_pb2.StatsRequest(), metadata=rpc.auth_metadata(TOKEN), timeout=5)
            assert reply.shard_index == 0
    finally:
        server.stop(None)


def test_empty_token_is_refused() -> None:
    with pytest.raises(ValueError, match="empty token"):
        create_ps_server(token="")
