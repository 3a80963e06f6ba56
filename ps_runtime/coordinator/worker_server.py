"""The Worker gRPC service: runs closures sent by reference, never by pickle."""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

import grpc

from ps_runtime.client.client import PSClient
from ps_runtime.coordinator import closures
from ps_runtime.coordinator.variables import handle_from_wire
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.wire import rpc
from ps_runtime.wire.codec import decode_value, encode_value

log = logging.getLogger(__name__)


class WorkerServicer(ps_pb2_grpc.WorkerServicer):
    """Executes `module:qualname` functions with JSON/tensor arguments."""

    def __init__(self, token: str) -> None:
        self._token = token
        self._lock = threading.Lock()  # guards _clients
        self._clients: dict[tuple[tuple[str, ...], int], PSClient] = {}

    def ps_client(self, addresses: list[str], replication: int = 0) -> PSClient:
        """This worker's client for a PS cluster (one per distinct address list)."""
        key = (tuple(addresses), replication)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = PSClient(key[0], self._token, replication=replication)
            return client

    def _resolve_handle(self, data: dict[str, Any]) -> Any:
        if data.get("kind") == "per_worker":
            return closures.resolve_per_worker(data)
        return handle_from_wire(data, self.ps_client(data["ps"], int(data.get("replication", 0))))

    def RunClosure(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            fn = closures.resolve_function(request.function)
            call = decode_value(request.args_json, request.tensors, self._resolve_handle)
            result = fn(*call.get("args", ()), **call.get("kwargs", {}))
            text, tensors = encode_value(result)
            return ps_pb2.RunClosureResponse(result_json=text, tensors=tensors)
        except Exception as e:  # user code: report it to the coordinator, keep serving
            log.warning("closure %s failed: %s", request.function, e)
            return ps_pb2.RunClosureResponse(
                error_type=type(e).__name__,
                error_message=str(e),
                error_traceback=traceback.format_exc(),
            )

    def close(self) -> None:
        """Close the PS clients."""
        with self._lock:
            for c in self._clients.values():
                c.close()
            self._clients.clear()


def create_worker_server(
    address: str = "127.0.0.1:0",
    *,
    token: str,
    max_workers: int = 4,
    tls: rpc.TLSFiles | None = None,
) -> tuple[grpc.Server, int]:
    """Start a worker on `address` (port 0 picks a free one); return (server, port)."""
    server = rpc.create_grpc_server(token, max_workers=max_workers)
    # grpcio-tools writes the stub modules without type hints.
    ps_pb2_grpc.add_WorkerServicer_to_server(WorkerServicer(token), server)  # type: ignore[no-untyped-call]
    rpc.add_health_service(server)
    port = rpc.bind(server, address, tls)
    server.start()
    return server, port
