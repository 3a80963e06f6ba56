"""Client of all PS shards: concurrent, sharded pulls and pushes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import numpy as np

from ps_runtime import rpc, sharding
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.wire import decode_tensor, encode_spec, encode_tensor, wire_dtype

Spec = tuple[str, Mapping[str, float]]


class PSClient:
    """One channel per PS shard; table calls fan out to the owning shards concurrently."""

    def __init__(self, addresses: Sequence[str], token: str, timeout: float | None = 120.0):
        if not addresses:
            raise ValueError("no PS addresses: the cluster needs at least one 'ps' task")
        self.addresses = tuple(addresses)
        self.timeout = timeout
        self._metadata = rpc.auth_metadata(token)
        self._channels = [rpc.create_channel(a) for a in self.addresses]
        self._stubs = [ps_pb2_grpc.ParameterServerStub(c) for c in self._channels]

    @property
    def num_shards(self) -> int:
        """Number of PS shards."""
        return len(self._stubs)

    def close(self) -> None:
        """Close every channel."""
        for c in self._channels:
            c.close()

    def _kw(self) -> dict[str, Any]:
        return {"metadata": self._metadata, "timeout": self.timeout}

    def create_variable(self, shard: int, name: str, shape: Sequence[int], dtype: Any,
                        initializer: Spec, optimizer: Spec,
                        initial_value: np.ndarray | None = None) -> bool:
        """Create a dense variable on `shard`; return False if it already existed."""
        req = ps_pb2.CreateVariableRequest(
            name=name, shape=list(shape), dtype=wire_dtype(dtype),
            initializer=encode_spec(initializer[0], dict(initializer[1])),
            optimizer=encode_spec(optimizer[0], dict(optimizer[1])))
        if initial_value is not None:
            req.initial_value.CopyFrom(encode_tensor(initial_value))
        return bool(self._stubs[shard].CreateVariable(req, **self._kw()).created)

    def create_table(self, name: str, dim: int, dtype: Any, initializer: Spec,
                     optimizer: Spec) -> bool:
        """Create a table's part on every shard; return True if any shard created it."""
        req = ps_pb2.CreateTableRequest(
            name=name, dim=dim, dtype=wire_dtype(dtype),
            initializer=encode_spec(initializer[0], dict(initializer[1])),
            optimizer=encode_spec(optimizer[0], dict(optimizer[1])))
        futures = [s.CreateTable.future(req, **self._kw()) for s in self._stubs]
        created = [f.result().created for f in futures]  # wait for every shard
        return any(created)

    def pull_dense(self, shard: int, name: str) -> np.ndarray:
        """Current value of a dense variable (read-only array)."""
        reply = self._stubs[shard].PullDense(ps_pb2.PullDenseRequest(name=name), **self._kw())
        return decode_tensor(reply)

    def push_dense(self, shard: int, name: str, grad: np.ndarray) -> int:
        """Apply a gradient to a dense variable; return its new version."""
        req = ps_pb2.PushDenseRequest(name=name, grad=encode_tensor(grad))
        return int(self._stubs[shard].PushDenseGrad(req, **self._kw()).version)

    def pull_rows(self, name: str, ids: np.ndarray, dim: int, dtype: Any) -> np.ndarray:
        """Rows of `ids` ([len(ids), dim]); each unique id is fetched once from its shard."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        unique, inverse = np.unique(ids, return_inverse=True)
        out = np.empty((len(unique), dim), dtype=dtype)
        parts = sharding.split_by_shard(unique, self.num_shards)
        futures = [
            (pos, self._stubs[s].PullRows.future(
                ps_pb2.PullRowsRequest(name=name, ids=encode_tensor(unique[pos])), **self._kw()))
            for s, pos in enumerate(parts) if len(pos)
        ]
        for pos, fut in futures:
            out[pos] = decode_tensor(fut.result())
        return out[inverse]

    def push_rows(self, name: str, ids: np.ndarray, grads: np.ndarray) -> None:
        """Sum gradients of duplicate ids, then push each shard's rows concurrently."""
        unique, summed = sharding.dedup_sum(ids, grads)
        parts = sharding.split_by_shard(unique, self.num_shards)
        futures = [
            self._stubs[s].PushRowGrads.future(
                ps_pb2.PushRowsRequest(name=name, ids=encode_tensor(unique[pos]),
                                       grads=encode_tensor(summed[pos])), **self._kw())
            for s, pos in enumerate(parts) if len(pos)
        ]
        for fut in futures:
            fut.result()

    def stats(self) -> list[ps_pb2.StatsResponse]:
        """Stats of every shard."""
        futures = [s.Stats.future(ps_pb2.StatsRequest(), **self._kw()) for s in self._stubs]
        return [f.result() for f in futures]

    def save_checkpoint(self, name: str) -> list[str]:
        """Save every shard under checkpoint `name`; return the written paths."""
        req = ps_pb2.CheckpointRequest(name=name)
        futures = [s.SaveCheckpoint.future(req, **self._kw()) for s in self._stubs]
        return [f.result().path for f in futures]

    def restore_checkpoint(self, name: str) -> list[str]:
        """Restore every shard from checkpoint `name`."""
        req = ps_pb2.CheckpointRequest(name=name)
        futures = [s.RestoreCheckpoint.future(req, **self._kw()) for s in self._stubs]
        return [f.result().path for f in futures]


def is_unavailable(error: BaseException) -> bool:
    """True for gRPC errors that mean 'the server is gone or unreachable'."""
    return isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE
