"""gRPC plumbing shared by servers and clients: message limits, auth, channels."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from ps_runtime import taskenv

# One message carries at most this much; larger tensors are streamed in chunks of
# DEFAULT_CHUNK_BYTES (and larger row requests are split), so the limit only stops
# malformed or hostile requests. Both sides set it.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
DEFAULT_CHUNK_BYTES = 2 * 1024 * 1024
GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    # Reconnect soon to a server that was down: a replacement PS is back within a second
    # or two, and calls fail at once while the channel waits out its backoff.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
AUTH_HEADER = "authorization"
# What a call to a server that went away ends with: UNAVAILABLE when it is gone (or was
# never there), CANCELLED for a call it had received but not yet started when it began
# to stop (a server stopped by SIGTERM, e.g. one moved to another node).
SERVER_GONE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
# What a call to an address whose server is not this job's ends with: after a server moved,
# its old port may be bound by a server of another job, which refuses this job's token.
# For a replicated job that is one more way a server went away (`NOT_OURS`); a token every
# replica of a shard refuses is a wrong token, and the call fails with it.
REFUSED = grpc.StatusCode.UNAUTHENTICATED
NOT_OURS = SERVER_GONE | {REFUSED}


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for TLS: this side's certificate and key, and the CA that signed peers."""

    cert: str = ""
    key: str = ""
    ca: str = ""

    @classmethod
    def from_env(cls) -> TLSFiles | None:
        """The files in TRAINHUB_TLS_CERT/KEY/CA when set, else None (plaintext on a trusted
        network)."""
        files = (taskenv.TLS_CERT, taskenv.TLS_KEY, taskenv.TLS_CA)
        cert, key, ca = (variable.read() or "" for variable in files)
        return cls(cert, key, ca) if (cert or ca) else None

    @staticmethod
    def _read(path: str) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for a server: needs cert and key."""
        if not (self.cert and self.key):
            raise ValueError(
                f"a TLS server needs {taskenv.TLS_CERT.name} and {taskenv.TLS_KEY.name}"
            )
        pair = (self._read(self.key) or b"", self._read(self.cert) or b"")
        return grpc.ssl_server_credentials([pair])

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials for a client: trusts `ca` (or the system roots)."""
        return grpc.ssl_channel_credentials(root_certificates=self._read(self.ca or self.cert))


def token_from_env() -> str:
    """Return TRAINHUB_JOB_TOKEN or raise with a hint on how to set it."""
    return taskenv.JOB_TOKEN.require(
        why="every runtime RPC needs the job's shared token (the agent and "
        "`python -m ps_runtime.launch` set it)"
    )


def _abort_unauthenticated(request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")


_allocator_tuned = False


def tune_allocator() -> None:
    """Keep freed multi-MiB buffers in the heap (glibc) instead of unmapping them.

    The bulk path allocates a few MiB per chunk; glibc's defaults return such blocks
    to the OS, so every chunk pays page faults on fresh memory, which costs more than
    the copy itself. No-op where glibc's mallopt is unavailable.
    """
    global _allocator_tuned
    if _allocator_tuned:
        return
    _allocator_tuned = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8
        libc.mallopt(m_arena_max, 2)  # gRPC's threads would each keep an arena's garbage
        libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)  # glibc's maximum
        libc.mallopt(m_trim_threshold, 128 * 1024 * 1024)  # enough for chunk churn
    except (OSError, AttributeError):
        pass


# grpc ships no type hints (and no stubs package is maintained), so its classes are Any.
class BearerAuthInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Reject every RPC whose `authorization` metadata is not `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty token would let anyone in; pass the job token")
        self._expected = f"Bearer {token}".encode()

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
        return _deny_like(continuation(handler_call_details))


def _deny_like(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as `handler` that rejects the call."""
    if handler is not None and handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(_abort_unauthenticated)
    if handler is not None and handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(_abort_unauthenticated)
    if handler is not None and handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(_abort_unauthenticated)
    return grpc.unary_unary_rpc_method_handler(_abort_unauthenticated)


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


def bind(server: grpc.Server, address: str, tls: TLSFiles | None = None) -> int:
    """Bind a port (TLS when `tls` or the TRAINHUB_TLS_* files are given); return it."""
    tls = tls or TLSFiles.from_env()
    if tls is not None:
        port = server.add_secure_port(address, tls.server_credentials())
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"cannot bind {address}: is the port already in use?")
    return int(port)


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Metadata tuple every client call passes as `metadata=`."""
    return ((AUTH_HEADER, f"Bearer {token}"),)


def create_channel(address: str, tls: TLSFiles | None = None) -> grpc.Channel:
    """Open a channel with the runtime's message limits (TLS when configured)."""
    tls = tls or TLSFiles.from_env()
    if tls is not None:
        return grpc.secure_channel(address, tls.channel_credentials(), options=GRPC_OPTIONS)
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
