"""The ParameterServer gRPC service of one PS shard."""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import numpy as np

from ps_runtime import checkpoint, chunks, rpc, taskenv
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.ps_stats import ServerStats, stats_response
from ps_runtime.ps_store import ParameterStore, PartInfo, SpecMismatchError, make_spec
from ps_runtime.tables import Lifecycle
from ps_runtime.wire import chunk_view, decode_tensor, encode_tensor

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
    except FileNotFoundError as e:
        context.abort(grpc.StatusCode.NOT_FOUND, str(e))
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

    def __init__(
        self, store: ParameterStore, shard_index: int = 0, checkpoint_dir: str | None = None
    ) -> None:
        self.store = store
        self.shard_index = shard_index
        self.checkpoint_dir = checkpoint_dir
        self.stats = ServerStats()

    # ------------------------------------------------------------- creation

    def CreateVariable(self, request: Any, context: grpc.ServicerContext) -> Any:
        def run() -> Any:
            spec = make_spec(
                "dense",
                tuple(request.shape),
                request.dtype or "float32",
                request.initializer.name or "zeros",
                dict(request.initializer.params),
                request.optimizer.name or "sgd",
                dict(request.optimizer.params),
            )
            initial = (
                decode_tensor(request.initial_value) if request.HasField("initial_value") else None
            )
            part = (
                PartInfo(request.base, request.base_rows, request.row_offset)
                if request.base
                else None
            )
            return ps_pb2.CreateResponse(
                created=self.store.create_dense(request.name, spec, initial, part)
            )

        self.stats.request(bytes_in=len(request.initial_value.data))
        return _call(context, run)

    def CreateTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        def run() -> Any:
            spec = make_spec(
                "table",
                (request.dim,),
                request.dtype or "float32",
                request.initializer.name or "zeros",
                dict(request.initializer.params),
                request.optimizer.name or "sgd",
                dict(request.optimizer.params),
            )
            lc = request.lifecycle
            if min(lc.admit_after, lc.evict_after_steps, lc.max_rows) < 0:
                raise ValueError("lifecycle settings must be >= 0 (0 turns one off)")
            lifecycle = Lifecycle(int(lc.admit_after), int(lc.evict_after_steps), int(lc.max_rows))
            return ps_pb2.CreateResponse(
                created=self.store.create_table(
                    request.name, spec, lifecycle, int(request.expected_rows)
                )
            )

        self.stats.request()
        return _call(context, run)

    # ---------------------------------------------------------------- dense

    def _apply_once(self, origin: Any, key: str, apply: Callable[[], int]) -> Any:
        """Apply a push unless its origin was applied before."""
        args = (origin.worker, origin.incarnation, origin.sequence, key)
        if not self.store.push_log.first_time(*args):
            return ps_pb2.PushResponse(duplicate=True)
        started = time.perf_counter()
        try:
            version = apply()
        except BaseException:
            self.store.push_log.forget(*args)
            raise
        self.stats.update(time.perf_counter() - started)
        return ps_pb2.PushResponse(version=version)

    def PullDense(self, request: Any, context: grpc.ServicerContext) -> Any:
        reply = _call(context, lambda: encode_tensor(self.store.dense(request.name).pull()))
        self.stats.request(bytes_out=len(reply.data))
        return reply

    def PushDenseGrad(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.stats.request(bytes_in=len(request.grad.data))
        return _call(
            context,
            lambda: self._apply_once(
                request.origin,
                request.name,
                lambda: self.store.dense(request.name).push(decode_tensor(request.grad)),
            ),
        )

    def PullDenseStream(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        """Serialized TensorChunks (see `chunks`): one copy from the live array per chunk."""
        var = _call(context, lambda: self.store.dense(request.name))
        chunk_bytes = int(request.chunk_bytes) or rpc.DEFAULT_CHUNK_BYTES
        if not 0 < chunk_bytes <= rpc.MAX_MESSAGE_BYTES // 2:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"chunk_bytes must be in (0, {rpc.MAX_MESSAGE_BYTES // 2}]",
            )
        dtype, shape = var.values.dtype.str, var.values.shape
        elements = max(1, chunk_bytes // var.values.dtype.itemsize)
        sent = 0

        def encode(data: np.ndarray, offset: int) -> bytes:
            # The first chunk names dtype and shape; the rest only offset and bytes.
            return chunks.encode_chunk(data, offset, dtype if offset == 0 else "", shape)

        for message in var.pull_chunks(elements, encode):
            sent += len(message)
            yield message
        self.stats.request(bytes_out=sent)

    def PushDenseStream(
        self, request_iterator: Iterator[chunks.PushChunk], context: grpc.ServicerContext
    ) -> Any:
        """Apply a streamed gradient chunk by chunk as it arrives.

        Applying while later chunks are still on the wire overlaps the update with the
        transfer. The push's origin is recorded first, so a retransmitted stream is
        ignored: if a stream breaks midway, the chunks received so far stay applied
        and no element is ever updated twice by the same push.
        """
        first = next(request_iterator, None)
        if first is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty push stream")
        assert first is not None
        var = _call(context, lambda: self.store.dense(first.name))
        origin = (first.origin.worker, first.origin.incarnation, first.origin.sequence, first.name)
        received = 0

        def apply() -> Any:
            nonlocal received
            size, dtype = var.values.size, var.values.dtype
            messages = itertools.chain([first], request_iterator)
            if not self.store.push_log.first_time(*origin):
                for m in messages:  # drain the retransmission
                    received += len(m.chunk.data)
                return ps_pb2.PushResponse(duplicate=True)
            started = time.perf_counter()
            step, covered = 0, 0
            for m in messages:
                piece = chunk_view(m.chunk, dtype, size)  # checks bounds before applying
                if step == 0:
                    step = var.begin_push()
                var.apply_piece(int(m.chunk.offset), piece, step)
                received += len(m.chunk.data)
                covered += len(piece)
            if covered != size:
                raise ValueError(
                    f"push stream for {first.name!r} carried {covered} of its {size} elements"
                )
            self.stats.update(time.perf_counter() - started)
            return ps_pb2.PushResponse(version=step)

        try:
            return _call(context, apply)
        finally:
            self.stats.request(bytes_in=received)

    # ---------------------------------------------------------------- tables

    def PullRows(self, request: Any, context: grpc.ServicerContext) -> Any:
        reply = _call(
            context, lambda: encode_tensor(self.store.table(request.name).pull(_ids(request.ids)))
        )
        self.stats.request(bytes_in=len(request.ids.data), bytes_out=len(reply.data))
        return reply

    def PushRowGrads(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.stats.request(bytes_in=len(request.ids.data) + len(request.grads.data))
        return _call(
            context,
            lambda: self._apply_once(
                request.origin,
                request.name,
                lambda: self.store.table(request.name).push(
                    _ids(request.ids), decode_tensor(request.grads)
                ),
            ),
        )

    # ------------------------------------------------------------ management

    def SetHyperparams(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.stats.request()
        return _call(
            context,
            lambda: ps_pb2.SetHyperparamsResponse(
                changed=self.store.set_hyperparams(list(request.names), dict(request.params))
            ),
        )

    def Stats(self, request: Any, context: grpc.ServicerContext) -> Any:
        return stats_response(self.store, self.stats, self.shard_index)

    def _checkpoint_root(self, context: grpc.ServicerContext) -> str:
        if not self.checkpoint_dir:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "this PS has no checkpoint directory; start it with "
                f"{taskenv.CHECKPOINT_DIR.name} (or launch --checkpoint-dir)",
            )
        return str(self.checkpoint_dir)

    def _checkpoint_path(self, name: str, context: grpc.ServicerContext) -> str:
        root = self._checkpoint_root(context)
        if not _CHECKPOINT_NAME.match(name):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"checkpoint name {name!r} must match {_CHECKPOINT_NAME.pattern}",
            )
        return os.path.join(root, name)

    def _num_shards(self, request: Any) -> int:
        return int(request.num_shards) or 1

    def SaveCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        directory = self._checkpoint_path(request.name, context)
        path, count = checkpoint.save_shard(
            self.store, directory, self.shard_index, self._num_shards(request), int(request.step)
        )
        log.info("saved %d variables to %s", count, path)
        return ps_pb2.CheckpointResponse(path=path, variables=count)

    def CommitCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        directory = self._checkpoint_path(request.name, context)
        path = _call(
            context,
            lambda: checkpoint.commit(
                directory, int(request.step), self._num_shards(request), int(request.keep)
            ),
        )
        return ps_pb2.CheckpointResponse(path=path)

    def RestoreCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.name:
            directory = self._checkpoint_path(request.name, context)
        else:
            found = checkpoint.latest(self._checkpoint_root(context))
            if found is None:
                context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"no committed checkpoint under {self.checkpoint_dir}",
                )
            directory = str(found)
        count = _call(
            context,
            lambda: checkpoint.restore_shard(
                self.store, directory, self.shard_index, self._num_shards(request)
            ),
        )
        log.info("restored %d variables from %s", count, directory)
        return ps_pb2.CheckpointResponse(path=directory, variables=count)


class _Captured:
    """Stands in for a server to capture the generated method-handler table."""

    service = ""
    handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        self.service, self.handlers = service, dict(handlers)


def add_servicer(servicer: ParameterServerServicer, server: grpc.Server) -> None:
    """Register the PS service; the two bulk streams use the zero-copy codec of `chunks`."""
    captured = _Captured()
    # grpcio-tools writes the stub modules without type hints.
    ps_pb2_grpc.add_ParameterServerServicer_to_server(servicer, captured)  # type: ignore[no-untyped-call]
    handlers = captured.handlers
    handlers["PullDenseStream"] = grpc.unary_stream_rpc_method_handler(
        servicer.PullDenseStream,
        request_deserializer=ps_pb2.PullDenseRequest.FromString,
        response_serializer=None,
    )  # already serialized
    handlers["PushDenseStream"] = grpc.stream_unary_rpc_method_handler(
        servicer.PushDenseStream,
        request_deserializer=chunks.decode_push_chunk,
        response_serializer=ps_pb2.PushResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(captured.service, handlers),)
    )
    server.add_registered_method_handlers(captured.service, handlers)


def create_ps_server(
    address: str = "127.0.0.1:0",
    *,
    token: str,
    shard_index: int = 0,
    checkpoint_dir: str | None = None,
    max_workers: int = 3,
    tls: rpc.TLSFiles | None = None,
) -> tuple[grpc.Server, int]:
    """Start a PS shard on `address` (port 0 picks a free one); return (server, port).

    A few handler threads are enough: they share one GIL, and more of them only add
    lock hand-offs (3 instead of 8 gave the `embed` benchmark about 10 % more steps).
    """
    rpc.tune_allocator()
    server = rpc.create_grpc_server(token, max_workers=max_workers)
    servicer = ParameterServerServicer(ParameterStore(), shard_index, checkpoint_dir)
    add_servicer(servicer, server)
    rpc.add_health_service(server)
    port = rpc.bind(server, address, tls)
    server.start()
    return server, port
