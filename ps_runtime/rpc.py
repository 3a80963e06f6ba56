"""gRPC plumbing shared by servers and clients: message limits, auth, channels."""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from typing import Any

import grpc

# Large enough for a 64 MiB dense variable plus slack; bigger tensors need chunking.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]
AUTH_HEADER = "authorization"
TOKEN_ENV = "TRAINHUB_JOB_TOKEN"


def token_from_env() -> str:
    """Return TRAINHUB_JOB_TOKEN or raise with a hint on how to set it."""
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise RuntimeError(
            f"{TOKEN_ENV} is not set: every runtime RPC needs the job's shared token "
            "(the agent and `python -m ps_runtime.launch` set it)"
        )
    return token


def _abort_unauthenticated(request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")


class BearerAuthInterceptor(grpc.ServerInterceptor):
    """Reject every RPC whose `authorization` metadata is not `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty token would let anyone in; pass the job token")
        self._expected = f"Bearer {token}".encode()
        self._deny = grpc.unary_unary_rpc_method_handler(_abort_unauthenticated)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        for key, value in handler_call_details.invocation_metadata or ():
            if key == AUTH_HEADER:
                given = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(given, self._expected):
                    return continuation(handler_call_details)
                break
        return self._deny


def create_grpc_server(token: str, max_workers: int = 8) -> grpc.Server:
    """Return an unstarted gRPC server with message limits and bearer-token auth."""
    from concurrent import futures

    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=[BearerAuthInterceptor(token)],
        options=GRPC_OPTIONS,
    )


def add_health_service(server: grpc.Server) -> Any:
    """Register the standard grpc.health.v1 service reporting SERVING; return its servicer."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer


def bind(server: grpc.Server, address: str) -> int:
    """Bind an insecure port; return the port actually bound (useful with port 0)."""
    port = server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"cannot bind {address}: is the port already in use?")
    return int(port)


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Metadata tuple every client call passes as `metadata=`."""
    return ((AUTH_HEADER, f"Bearer {token}"),)


def create_channel(address: str) -> grpc.Channel:
    """Open an insecure channel with the runtime's message limits."""
    return grpc.insecure_channel(address, options=GRPC_OPTIONS)


def check_health(address: str, token: str, timeout: float = 1.0) -> bool:
    """Return True if the server at `address` answers SERVING to a health check."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with create_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(
                health_pb2.HealthCheckRequest(service=""),
                timeout=timeout,
                metadata=auth_metadata(token),
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
