"""Client of all PS shards: concurrent, sharded, chunked pulls and pushes.

The data calls (pulls and pushes) go on one data stream per server (`streams`), as
tagged requests answered in any order; the control calls (create, checkpoints, stats)
are unary. Every call that touches several shards sends all their requests at once
and only then waits, so shards work in parallel and the caller can overlap its own
work with `*_async` calls. Pushes carry (worker, incarnation, sequence); a push
retried after a transport error is applied once by the PS.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np

from ps_runtime.client.answers import Assembly, push_reply, rows_into, value_into
from ps_runtime.client.pending import PendingDense, PendingPush, PendingRows, Wait
from ps_runtime.client.routes import TRANSPORT_ATTEMPTS, Routes
from ps_runtime.client.streams import Answer, Call
from ps_runtime.proto import ps_pb2
from ps_runtime.shards import sharding
from ps_runtime.wire import chunks, rpc
from ps_runtime.wire.codec import encode_spec, encode_tensor, wire_dtype
from ps_runtime.wire.frames import push_frames, tensor_view

__all__ = ["PSClient", "PendingDense", "PendingPush", "PendingRows", "is_unavailable"]

Spec = tuple[str, Mapping[str, float]]


class PSClient:
    """One channel per PS server; table calls fan out to the owning shards concurrently.

    With `replication` R, each shard also lives on the next R servers; calls go to one
    replica of each shard and fail over to the next when it stops answering (`Routes`).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        token: str,
        timeout: float | None = 120.0,
        chunk_bytes: int = rpc.DEFAULT_CHUNK_BYTES,
        replication: int = 0,
    ):
        if not addresses:
            raise ValueError("no PS addresses: the cluster needs at least one 'ps' task")
        self.timeout = timeout
        self.chunk_bytes = chunk_bytes
        self.replication = replication
        self._routes = Routes(addresses, token, replication)
        rpc.tune_allocator()
        self._pool = ThreadPoolExecutor(
            max_workers=2 * len(addresses) + 2, thread_name_prefix="ps-client"
        )
        # Origin of this client's pushes: a retransmitted push is applied once.
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.incarnation = time.time_ns()
        self._sequence = itertools.count(1)
        self._lock = threading.Lock()  # guards _accumulated
        self._accumulated: dict[str, tuple[int, list[np.ndarray], list[np.ndarray]]] = {}

    @property
    def num_shards(self) -> int:
        """Number of PS shards."""
        return len(self._routes.servers)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Where each PS server listens now."""
        return self._routes.addresses

    def move(self, addresses: Sequence[str]) -> None:
        """Servers moved (a replicated job's server was placed on another node): talk to
        each at its new address from now on."""
        self._routes.move(addresses)

    def close(self) -> None:
        """Close every channel."""
        self._pool.shutdown(wait=False)
        self._routes.close()

    def _kw(self, shard: int) -> dict[str, Any]:
        return {"metadata": self._routes.metadata[shard], "timeout": self.timeout}

    def _method(self, server: int, method: str) -> Any:
        """`method` of the stub for `server` (at its current address)."""
        return getattr(self._routes.servers[server].stub, method)

    def _unary(self, shard: int, method: str, request: Any, attempts: int = 1) -> Any:
        """A unary call for `shard`, on the server answering for it (with failover)."""
        return self._routes.call(
            shard, lambda server: self._method(server, method)(request, **self._kw(shard)), attempts
        )

    def _start(self, shard: int, method: str, request: Any, attempts: int = 1) -> Any:
        """Start a unary call for `shard`; return a `wait()` for its reply (with failover)."""
        server = self._routes.server(shard)
        future = self._method(server, method).future(request, **self._kw(shard))
        return lambda: self._routes.settle(
            shard,
            server,
            future,
            lambda srv: self._method(srv, method)(request, **self._kw(shard)),
            attempts,
        )

    def _data(self, server: int, shard: int, method: str, request: Any, answer: Answer) -> Call:
        """Send a data call for `shard` on `server`'s data stream."""
        return self._routes.servers[server].data.start(
            method, shard, [request.SerializeToString()], answer, self.timeout
        )

    def _data_call(
        self, shard: int, method: str, request: Any, answer: Answer, attempts: int = 1
    ) -> Any:
        """A data call for `shard`, waited for (with failover and retries, as `_unary`)."""
        return self._routes.call(
            shard,
            lambda server: self._data(server, shard, method, request, answer).result(),
            attempts,
        )

    def _start_data(
        self, shard: int, method: str, request: Any, answer: Answer, attempts: int = 1
    ) -> Wait:
        """Start a data call for `shard`; return a `wait()` for its value (as `_start`)."""
        server = self._routes.server(shard)
        call = self._data(server, shard, method, request, answer)
        return lambda: self._routes.settle(
            shard,
            server,
            call,
            lambda srv: self._data(srv, shard, method, request, answer).result(),
            attempts,
        )

    def _each_shard(self, method: str, request: Any) -> list[Any]:
        """The same call on every shard at once; their replies in shard order."""
        waits = [self._start(s, method, request) for s in range(self.num_shards)]
        return [wait() for wait in waits]

    def _origin(self) -> ps_pb2.PushOrigin:
        return ps_pb2.PushOrigin(
            worker=self.worker_id, incarnation=self.incarnation, sequence=next(self._sequence)
        )

    # ------------------------------------------------------------- creation

    def create_variable(
        self,
        shard: int,
        name: str,
        shape: Sequence[int],
        dtype: Any,
        initializer: Spec,
        optimizer: Spec,
        initial_value: np.ndarray | None = None,
        part: tuple[str, int, int] | None = None,
    ) -> bool:
        """Create a dense variable (or one part: base, base_rows, row_offset) on `shard`."""
        req = ps_pb2.CreateVariableRequest(
            name=name,
            shape=list(shape),
            dtype=wire_dtype(dtype),
            initializer=encode_spec(initializer[0], dict(initializer[1])),
            optimizer=encode_spec(optimizer[0], dict(optimizer[1])),
        )
        if part is not None:
            req.base, req.base_rows, req.row_offset = part
        if initial_value is not None:
            req.initial_value.CopyFrom(encode_tensor(initial_value))
        return bool(self._unary(shard, "CreateVariable", req).created)

    def create_table(
        self,
        name: str,
        dim: int,
        dtype: Any,
        initializer: Spec,
        optimizer: Spec,
        admit_after: int = 0,
        evict_after_steps: int = 0,
        max_rows: int = 0,
        expected_rows: int = 0,
    ) -> bool:
        """Create a table's part on every shard; return True if any shard created it.

        `max_rows` and `expected_rows` are per shard.
        """
        req = ps_pb2.CreateTableRequest(
            name=name,
            dim=dim,
            dtype=wire_dtype(dtype),
            initializer=encode_spec(initializer[0], dict(initializer[1])),
            optimizer=encode_spec(optimizer[0], dict(optimizer[1])),
            lifecycle=ps_pb2.TableLifecycle(
                admit_after=admit_after, evict_after_steps=evict_after_steps, max_rows=max_rows
            ),
            expected_rows=expected_rows,
            num_shards=self.num_shards,
        )
        return any(r.created for r in self._each_shard("CreateTable", req))

    # ---------------------------------------------------------------- dense

    def pull_dense(
        self, shard: int, name: str, nbytes: int = 0, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Current value of a dense variable; streamed in chunks when `nbytes` is large.

        `out` (C-contiguous, right shape and dtype) receives the value, copied once from
        gRPC's buffers, without a fresh allocation, which for tens of MiB saves the page
        faults of new memory.
        """
        return self.pull_dense_async(shard, name, nbytes, out).result()

    def pull_dense_async(
        self, shard: int, name: str, nbytes: int = 0, out: np.ndarray | None = None
    ) -> PendingDense:
        """`pull_dense` in the background: a request on the data stream."""
        if nbytes <= self.chunk_bytes:
            request = ps_pb2.PullDenseRequest(name=name)
            answer: Answer = lambda body, last: value_into(tensor_view(body), out)  # noqa: E731
            return PendingDense(
                self._start_data(shard, "PullDense", request, answer, TRANSPORT_ATTEMPTS)
            )
        request = ps_pb2.PullDenseRequest(name=name, chunk_bytes=self.chunk_bytes)
        return PendingDense(
            self._start_data(shard, "PullDenseStream", request, Assembly(name, out))
        )

    def push_dense(self, shard: int, name: str, grad: np.ndarray) -> int:
        """Apply a gradient to a dense variable; return its new version (0 if a duplicate)."""
        origin = self._origin()
        grad = np.ascontiguousarray(grad)
        wire_dtype(grad.dtype)  # refused here, not on the stream's sending thread
        if grad.nbytes <= self.chunk_bytes:
            req = ps_pb2.PushDenseRequest(name=name, grad=encode_tensor(grad), origin=origin)
            return int(
                self._data_call(shard, "PushDenseGrad", req, push_reply, TRANSPORT_ATTEMPTS).version
            )

        def frames(id: int) -> Iterator[bytes]:
            return push_frames(id, shard, chunks.push_pieces(name, origin, grad, self.chunk_bytes))

        return int(
            self._routes.call(
                shard,
                lambda server: (
                    self._routes.servers[server]
                    .data.start_chunked(frames, push_reply, self.timeout)
                    .result()
                ),
                TRANSPORT_ATTEMPTS,
            ).version
        )

    def push_dense_async(self, shard: int, name: str, grad: np.ndarray) -> Future[int]:
        """`push_dense` in the background."""
        return self._pool.submit(self.push_dense, shard, name, grad)

    # ---------------------------------------------------------------- tables

    def _row_groups(self, ids: np.ndarray, row_bytes: int) -> list[tuple[int, np.ndarray]]:
        """(shard, positions) groups, each small enough for one message."""
        per_message = max(1, self.chunk_bytes // max(row_bytes, 8))
        groups = []
        for s, pos in enumerate(sharding.split_by_shard(ids, self.num_shards)):
            for start in range(0, len(pos), per_message):
                groups.append((s, pos[start : start + per_message]))
        return groups

    def pull_rows_async(
        self, name: str, ids: np.ndarray, dim: int, dtype: Any, unique: bool = False
    ) -> PendingRows:
        """Start pulling the rows of `ids`; each unique id is fetched once from its shard.

        With `unique=True` the ids are taken as already unique and rows come back in
        their order (no de-duplication pass).
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if unique:
            uniq, inverse = ids, None
        else:
            d = sharding.dedup(ids)
            uniq, inverse = d.unique, d.inverse
        out = np.empty((len(uniq), dim), dtype=dtype)
        waits = [
            self._start_data(
                s,
                "PullRows",
                ps_pb2.PullRowsRequest(name=name, ids=encode_tensor(uniq[pos])),
                rows_into(out, pos),
                TRANSPORT_ATTEMPTS,
            )
            for s, pos in self._row_groups(uniq, dim * out.dtype.itemsize)
        ]
        return PendingRows(waits, out, inverse)

    def pull_rows(self, name: str, ids: np.ndarray, dim: int, dtype: Any) -> np.ndarray:
        """Rows of `ids` ([len(ids), dim])."""
        return self.pull_rows_async(name, ids, dim, dtype).result()

    def push_rows_async(
        self, name: str, ids: np.ndarray, grads: np.ndarray, unique: bool = False
    ) -> PendingPush:
        """Start pushing row gradients; duplicates are summed first unless `unique`."""
        if unique:
            uniq = np.asarray(ids, dtype=np.int64).reshape(-1)
            summed = np.asarray(grads)
        else:
            uniq, summed = sharding.dedup_sum(ids, grads)
        origin = self._origin()
        waits = []
        row_bytes = summed[0].nbytes if len(summed) else 8
        for s, pos in self._row_groups(uniq, row_bytes):
            req = ps_pb2.PushRowsRequest(
                name=name,
                ids=encode_tensor(uniq[pos]),
                grads=encode_tensor(summed[pos]),
                origin=origin,
            )
            waits.append(self._start_data(s, "PushRowGrads", req, push_reply, TRANSPORT_ATTEMPTS))
        return PendingPush(waits)

    def push_rows(self, name: str, ids: np.ndarray, grads: np.ndarray) -> None:
        """Sum gradients of duplicate ids, then push each shard's rows concurrently."""
        self.push_rows_async(name, ids, grads).result()

    def accumulate_rows(
        self, name: str, ids: np.ndarray, grads: np.ndarray, steps: int
    ) -> PendingPush | None:
        """Delayed model updating: keep gradients locally, push every `steps` calls."""
        with self._lock:
            count, id_parts, grad_parts = self._accumulated.get(name, (0, [], []))
            id_parts.append(np.asarray(ids, dtype=np.int64).reshape(-1))
            grad_parts.append(np.asarray(grads))
            count += 1
            if count < steps:
                self._accumulated[name] = (count, id_parts, grad_parts)
                return None
            self._accumulated.pop(name, None)
        return self.push_rows_async(name, np.concatenate(id_parts), np.concatenate(grad_parts))

    def flush_accumulated(self) -> None:
        """Push every table's accumulated gradients now."""
        with self._lock:
            pending, self._accumulated = self._accumulated, {}
        for name, (_, id_parts, grad_parts) in pending.items():
            self.push_rows(name, np.concatenate(id_parts), np.concatenate(grad_parts))

    # ------------------------------------------------------------ management

    def set_hyperparams(self, params: Mapping[str, float], names: Sequence[str] = ()) -> int:
        """Change optimizer hyperparameters (e.g. learning_rate) on every shard, live."""
        req = ps_pb2.SetHyperparamsRequest(
            names=list(names), params={k: float(v) for k, v in params.items()}
        )
        return sum(r.changed for r in self._each_shard("SetHyperparams", req))

    def stats(self) -> list[ps_pb2.StatsResponse]:
        """Stats of every shard."""
        return self._each_shard("Stats", ps_pb2.StatsRequest())

    def save_checkpoint(self, name: str, step: int = 0, keep: int = 0) -> list[str]:
        """Save every shard under checkpoint `name`, then commit it; return the shard files.

        Only a committed checkpoint (all shards written) is ever restored; `keep` > 0
        deletes all but the newest `keep` committed checkpoints.
        """
        req = ps_pb2.CheckpointRequest(name=name, step=step, num_shards=self.num_shards, keep=keep)
        paths = [r.path for r in self._each_shard("SaveCheckpoint", req)]
        self._unary(0, "CommitCheckpoint", req)
        return paths

    def restore_checkpoint(self, name: str = "") -> list[str]:
        """Restore every shard from checkpoint `name` (default: the newest committed one)."""
        req = ps_pb2.CheckpointRequest(name=name, num_shards=self.num_shards)
        return [r.path for r in self._each_shard("RestoreCheckpoint", req)]


def is_unavailable(error: BaseException) -> bool:
    """True for gRPC errors that mean 'the server is gone or unreachable'."""
    return isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE
