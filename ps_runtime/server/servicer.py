"""The ParameterServer gRPC service of one PS shard."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import grpc
import numpy as np
from grpc_health.v1 import health_pb2

from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.server import rejoin as rejoining
from ps_runtime.server import streams
from ps_runtime.server.replication import ReplicaSet
from ps_runtime.server.shard_service import FORWARD_TIMEOUT_S, ShardService, _call
from ps_runtime.server.stats import stats_response
from ps_runtime.server.store import ParameterStore, PartInfo, make_spec
from ps_runtime.server.tables import Lifecycle
from ps_runtime.wire import chunks, rpc
from ps_runtime.wire.codec import chunk_view, decode_tensor, encode_tensor

log = logging.getLogger(__name__)
T = TypeVar("T")
# A replicated server's handlers wait for their forwards to be handled by peers, whose
# handlers may be forwarding back: enough threads that forwarded updates always find one.
REPLICATED_HANDLER_THREADS = 32


def _ids(tensor: ps_pb2.Tensor) -> np.ndarray:
    ids = decode_tensor(tensor)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"ids must be a 1-D integer tensor, got {ids.dtype} {ids.shape}")
    return ids.astype(np.int64, copy=False)


class ParameterServerServicer(ShardService, ps_pb2_grpc.ParameterServerServicer):
    """Serves the shards of one PS server (its own, plus those it backs up): the data
    calls here, checkpoints and replicas' calls in `ShardService`."""

    # ------------------------------------------------------------- creation

    def CreateVariable(self, request: Any, context: grpc.ServicerContext) -> Any:
        def run(store: ParameterStore) -> Any:
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
                created=store.create_dense(request.name, spec, initial, part)
            )

        self.stats.request(bytes_in=len(request.initial_value.data))
        return self._update(context, run, "CreateVariable", request, ps_pb2.CreateResponse())

    def CreateTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        def run(store: ParameterStore) -> Any:
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
                created=store.create_table(
                    request.name, spec, lifecycle, int(request.expected_rows)
                )
            )

        self.stats.request()
        return self._update(context, run, "CreateTable", request, ps_pb2.CreateResponse())

    # ---------------------------------------------------------------- dense

    def _apply_once(
        self, store: ParameterStore, origin: Any, key: str, apply: Callable[[], int]
    ) -> Any:
        """Apply a push unless its origin was applied before."""
        args = (origin.worker, origin.incarnation, origin.sequence, key)
        if not store.push_log.first_time(*args):
            return ps_pb2.PushResponse(duplicate=True)
        started = time.perf_counter()
        try:
            version = apply()
        except BaseException:
            store.push_log.forget(*args)
            raise
        self.stats.update(time.perf_counter() - started)
        return ps_pb2.PushResponse(version=version)

    def PullDense(self, request: Any, context: grpc.ServicerContext) -> Any:
        return encode_tensor(self.pull_dense_value(request, context))

    def pull_dense_value(self, request: Any, context: grpc.ServicerContext) -> np.ndarray:
        """A copy of the variable's value (PullDense without the encoding)."""
        store = self._store(context)
        value = _call(context, lambda: store.dense(request.name).pull())
        self.stats.request(bytes_out=value.nbytes)
        return value

    def PushDenseGrad(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.stats.request(bytes_in=len(request.grad.data))
        return self._update(
            context,
            lambda store: self._apply_once(
                store,
                request.origin,
                request.name,
                lambda: store.dense(request.name).push(decode_tensor(request.grad)),
            ),
            "PushDenseGrad",
            request,
            ps_pb2.PushResponse(),
        )

    def PullDenseStream(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        """Serialized TensorChunks (see `chunks`): one copy from the live array per chunk."""
        return self.pull_chunks(request, context, lambda head, view, last: b"".join((head, view)))

    def pull_chunks(
        self, request: Any, context: grpc.ServicerContext, wrap: chunks.Wrap
    ) -> Iterator[bytes]:
        """The value in chunks, each `wrap(chunk header, data, is the last)`: the one copy
        from the live array is wrap's (a plain TensorChunk, or a data-stream frame)."""
        store = self._store(context)
        var = _call(context, lambda: store.dense(request.name))
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
            view = data.data.cast("B")
            head = chunks.chunk_header(offset, len(view), dtype if offset == 0 else "", shape)
            return wrap(head, view, offset + len(data) >= var.values.size)

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
        and no element is ever updated twice by the same push. With replication the
        whole push is received first, then applied and forwarded.
        """
        first = next(request_iterator, None)
        if first is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty push stream")
        assert first is not None
        origin = (first.origin.worker, first.origin.incarnation, first.origin.sequence, first.name)
        messages: Iterable[chunks.PushChunk] = itertools.chain([first], request_iterator)
        received = 0

        def apply(store: ParameterStore) -> Any:
            nonlocal received
            var = store.dense(first.name)
            size, dtype = var.values.size, var.values.dtype
            if not store.push_log.first_time(*origin):
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
                store.push_log.forget(*origin)
                raise ValueError(
                    f"push stream for {first.name!r} carried {covered} of its {size} elements"
                )
            self.stats.update(time.perf_counter() - started)
            return ps_pb2.PushResponse(version=step)

        try:
            if not self.replicas.replication:
                store = self._store(context)
                return _call(context, lambda: apply(store))
            messages = kept = list(messages)

            def forward(server: int, metadata: Any, grace: float) -> Any:
                encoded = (
                    chunks.encode_push_chunk(
                        np.frombuffer(m.chunk.data, np.uint8),
                        int(m.chunk.offset),
                        *((m.name, m.origin, m.chunk.dtype, m.chunk.shape) if i == 0 else ()),
                    )
                    for i, m in enumerate(kept)
                )
                return self.replicas.push_stream(server).future(
                    encoded,
                    metadata=metadata,
                    timeout=grace or FORWARD_TIMEOUT_S,
                    wait_for_ready=bool(grace),
                )

            return _call(
                context,
                lambda: self.replicas.update(context, apply, forward, ps_pb2.PushResponse()),
            )
        finally:
            self.stats.request(bytes_in=received)

    # ---------------------------------------------------------------- tables

    def PullRows(self, request: Any, context: grpc.ServicerContext) -> Any:
        return encode_tensor(self.pull_rows_value(request, context))

    def pull_rows_value(self, request: Any, context: grpc.ServicerContext) -> np.ndarray:
        """The rows asked for (PullRows without the encoding)."""
        store = self._store(context)
        rows = _call(context, lambda: store.table(request.name).pull(_ids(request.ids)))
        self.stats.request(bytes_in=len(request.ids.data), bytes_out=rows.nbytes)
        return rows

    def PushRowGrads(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.stats.request(bytes_in=len(request.ids.data) + len(request.grads.data))
        return self._update(
            context,
            lambda store: self._apply_once(
                store,
                request.origin,
                request.name,
                lambda: store.table(request.name).push(
                    _ids(request.ids), decode_tensor(request.grads)
                ),
            ),
            "PushRowGrads",
            request,
            ps_pb2.PushResponse(),
        )

    # ------------------------------------------------------------ management

    def SetHyperparams(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.stats.request()
        return self._update(
            context,
            lambda store: ps_pb2.SetHyperparamsResponse(
                changed=store.set_hyperparams(list(request.names), dict(request.params))
            ),
            "SetHyperparams",
            request,
            ps_pb2.SetHyperparamsResponse(),
        )

    def Stats(self, request: Any, context: grpc.ServicerContext) -> Any:
        shard = self.replicas.shard_of(context)
        return stats_response(shard.store, self.stats, shard.index)


class _Captured:
    """Stands in for a server to capture the generated method-handler table."""

    service = ""
    handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        self.service, self.handlers = service, dict(handlers)


def add_servicer(
    servicer: ParameterServerServicer, server: grpc.Server, data_workers: int = 3
) -> streams.DataStreams:
    """Register the PS service; the two bulk streams use the zero-copy codec of `chunks`,
    the data stream that of `frames`, its requests run on `data_workers` threads."""
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
    data = streams.DataStreams(servicer, data_workers)
    handlers[streams.METHOD] = grpc.stream_stream_rpc_method_handler(
        data.serve,
        request_deserializer=None,  # frames are decoded by `frames`, without a copy
        response_serializer=None,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(captured.service, handlers),)
    )
    server.add_registered_method_handlers(captured.service, handlers)
    return data


def create_ps_server(
    address: str = "127.0.0.1:0",
    *,
    token: str,
    shard_index: int = 0,
    checkpoint_dir: str | None = None,
    max_workers: int = 3,
    tls: rpc.TLSFiles | None = None,
    addresses: Sequence[str] = (),
    replication: int = 0,
    rejoin: bool = False,
) -> tuple[grpc.Server, int]:
    """Start PS server `shard_index` on `address` (port 0 picks a free one); return
    (server, port).

    A few handler threads are enough: they share one GIL, and more of them only add
    lock hand-offs (3 instead of 8 gave the `embed` benchmark about 10 % more steps).
    With `replication` (and every server's `addresses`), the server holds its shard and
    backs up the ones before it; it copies them from a live replica before it reports
    SERVING, and with `rejoin` (a replacement) it fails when no replica has them. Its
    handlers then wait on each other's forwards, so it gets more threads; at most
    `max_workers` client updates run at once.
    """
    rpc.tune_allocator()
    if replication:
        replicas = ReplicaSet(shard_index, tuple(addresses), replication, token, max_workers)
        max_workers = REPLICATED_HANDLER_THREADS
    else:
        replicas = ReplicaSet.alone(shard_index, token)
    # Each client's data stream holds a handler thread while it is open (idle, waiting
    # for answers); its requests run on `max_workers` threads of their own.
    server = rpc.create_grpc_server(token, max_workers=max_workers + streams.MAX_CLIENTS)
    servicer = ParameterServerServicer(replicas, checkpoint_dir)
    server = streams.StreamingServer(server, add_servicer(servicer, server, max_workers))
    health = rpc.add_health_service(server)
    port = rpc.bind(server, address, tls)
    if replication:
        for shard in replicas.shards.values():
            shard.syncing = True  # refuse clients until copied
        health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    server.start()
    if replication:
        try:
            rejoining.rejoin(replicas, replacement=rejoin)
        except BaseException:
            server.stop(0)
            raise
        health.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, port
