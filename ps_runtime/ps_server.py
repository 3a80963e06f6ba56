"""The ParameterServer gRPC service of one PS shard."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import numpy as np

from ps_runtime import rpc
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.ps_store import ParameterStore, SpecMismatchError, make_spec
from ps_runtime.wire import decode_tensor, encode_tensor

log = logging.getLogger(__name__)
T = TypeVar("T")
_CHECKPOINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _call(context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
    """Run `fn`, turning user-caused errors into gRPC status codes."""
    try:
        return fn()
    except KeyError as e:
        context.abort(grpc.StatusCode.NOT_FOUND, str(e.args[0] if e.args else e))
    except SpecMismatchError as e:
        context.abort(grpc.StatusCode.ALREADY_EXISTS, str(e))
    except (ValueError, TypeError) as e:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
    raise AssertionError("unreachable")  # context.abort always raises


def _ids(tensor: ps_pb2.Tensor) -> np.ndarray:
    ids = decode_tensor(tensor)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"ids must be a 1-D integer tensor, got {ids.dtype} {ids.shape}")
    return ids.astype(np.int64, copy=False)


class ParameterServerServicer(ps_pb2_grpc.ParameterServerServicer):
    """Serves a ParameterStore; one instance per PS shard."""

    def __init__(self, store: ParameterStore, shard_index: int = 0,
                 checkpoint_dir: str | None = None) -> None:
        self.store = store
        self.shard_index = shard_index
        self.checkpoint_dir = checkpoint_dir

    def CreateVariable(self, request: Any, context: grpc.ServicerContext) -> Any:
        def run() -> Any:
            spec = make_spec("dense", tuple(request.shape), request.dtype or "float32",
                             request.initializer.name or "zeros", dict(request.initializer.params),
                             request.optimizer.name or "sgd", dict(request.optimizer.params))
            initial = decode_tensor(request.initial_value) if request.HasField(
                "initial_value") else None
            return ps_pb2.CreateResponse(created=self.store.create_dense(request.name, spec,
                                                                         initial))
        return _call(context, run)

    def CreateTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        def run() -> Any:
            spec = make_spec("table", (request.dim,), request.dtype or "float32",
                             request.initializer.name or "zeros", dict(request.initializer.params),
                             request.optimizer.name or "sgd", dict(request.optimizer.params))
            return ps_pb2.CreateResponse(created=self.store.create_table(request.name, spec))
        return _call(context, run)

    def PullDense(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: encode_tensor(self.store.dense(request.name).pull()))

    def PushDenseGrad(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: ps_pb2.PushResponse(
            version=self.store.dense(request.name).push(decode_tensor(request.grad))))

    def PullRows(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: encode_tensor(
            self.store.table(request.name).pull(_ids(request.ids))))

    def PushRowGrads(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: ps_pb2.PushResponse(
            version=self.store.table(request.name).push(_ids(request.ids),
                                                        decode_tensor(request.grads))))

    def Stats(self, request: Any, context: grpc.ServicerContext) -> Any:
        out = ps_pb2.StatsResponse(shard_index=self.shard_index)
        for e in self.store.entries():
            kind = e.spec.kind
            shape = [e.size, e.spec.shape[0]] if kind == "table" else list(e.spec.shape)  # type: ignore[union-attr]
            out.variables.add(name=e.name, kind=kind, shape=shape, bytes=e.nbytes(),
                              pulls=e.pulls, pushes=e.pushes, optimizer=e.spec.optimizer[0])
        return out

    def _checkpoint_path(self, name: str, context: grpc.ServicerContext) -> str:
        if not self.checkpoint_dir:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "this PS has no checkpoint directory; start it with "
                          "TRAINHUB_CHECKPOINT_DIR (or launch --checkpoint-dir)")
        if not _CHECKPOINT_NAME.match(name):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"checkpoint name {name!r} must match {_CHECKPOINT_NAME.pattern}")
        directory = os.path.join(str(self.checkpoint_dir), name)
        os.makedirs(directory, exist_ok=True)
        return os.path.join(directory, f"ps-{self.shard_index}.npz")

    def SaveCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        path = self._checkpoint_path(request.name, context)
        count = self.store.save(path)
        log.info("saved %d variables to %s", count, path)
        return ps_pb2.CheckpointResponse(path=path, variables=count)

    def RestoreCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        path = self._checkpoint_path(request.name, context)
        if not os.path.exists(path):
            context.abort(grpc.StatusCode.NOT_FOUND, f"no checkpoint at {path}")
        count = self.store.restore(path)
        return ps_pb2.CheckpointResponse(path=path, variables=count)


def create_ps_server(
    address: str = "127.0.0.1:0",
    *,
    token: str,
    shard_index: int = 0,
    checkpoint_dir: str | None = None,
    max_workers: int = 8,
) -> tuple[grpc.Server, int]:
    """Start a PS shard on `address` (port 0 picks a free one); return (server, port)."""
    server = rpc.create_grpc_server(token, max_workers=max_workers)
    servicer = ParameterServerServicer(ParameterStore(), shard_index, checkpoint_dir)
    ps_pb2_grpc.add_ParameterServerServicer_to_server(servicer, server)
    rpc.add_health_service(server)
    port = rpc.bind(server, address)
    server.start()
    return server, port
