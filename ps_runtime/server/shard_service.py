"""What a PS server answers besides data: checkpoints and its replicas' calls.

`ShardService` is the base of `servicer.ParameterServerServicer`: it finds the shard a
call is for, runs updates through the replicas (`replication`) and maps user errors to
gRPC status codes.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from ps_runtime import taskenv
from ps_runtime.proto import ps_pb2
from ps_runtime.server import checkpoint, rejoin
from ps_runtime.server.replication import ReplicaSet
from ps_runtime.server.stats import ServerStats
from ps_runtime.server.store import ParameterStore, SpecMismatchError

log = logging.getLogger("ps_runtime.server.servicer")
T = TypeVar("T")
_CHECKPOINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
FORWARD_TIMEOUT_S = 60.0


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


class ShardService:
    """The shard lookup, update path, checkpoint and replica calls of a PS server."""

    def __init__(self, replicas: ReplicaSet, checkpoint_dir: str | None = None) -> None:
        self.replicas = replicas
        self.checkpoint_dir = checkpoint_dir
        self.stats = ServerStats()

    def _store(self, context: grpc.ServicerContext) -> ParameterStore:
        """The store of the shard a client's read is for."""
        shard = self.replicas.shard_of(context)
        self.replicas.for_client(shard, context)
        return shard.store

    def _update(
        self,
        context: grpc.ServicerContext,
        apply: Callable[[ParameterStore], Any],
        method: str,
        request: Any,
        empty: Any,
    ) -> Any:
        """Apply an update here and on the shard's other replicas (`method` forwards it)."""

        def forward(server: int, metadata: Any, grace: float) -> Any:
            call = getattr(self.replicas.stub(server), method)
            return call.future(
                request,
                metadata=metadata,
                timeout=grace or FORWARD_TIMEOUT_S,
                wait_for_ready=bool(grace),
            )

        return _call(context, lambda: self.replicas.update(context, apply, forward, empty))

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
        shard = self.replicas.shard_of(context)
        self.replicas.for_client(shard, context)
        path, count = checkpoint.save_shard(
            shard.store, directory, shard.index, self._num_shards(request), int(request.step)
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
        shard = self.replicas.shard_of(context)

        def restore(store: ParameterStore) -> Any:
            count = checkpoint.restore_shard(
                store, directory, shard.index, self._num_shards(request)
            )
            log.info("restored %d variables of shard %d from %s", count, shard.index, directory)
            return ps_pb2.CheckpointResponse(path=directory, variables=count)

        forwarded = ps_pb2.CheckpointRequest()
        forwarded.CopyFrom(request)
        forwarded.name = os.path.basename(directory)  # the replicas restore the same one
        return self._update(
            context, restore, "RestoreCheckpoint", forwarded, ps_pb2.CheckpointResponse()
        )

    def CopyShard(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        shard = self.replicas.shard_of(context)
        self.replicas.for_client(shard, context)  # a replica still syncing has no copy
        yield from rejoin.copy_out(self.replicas, shard, int(request.server), request.address)

    def Join(self, request: Any, context: grpc.ServicerContext) -> Any:
        shard = self.replicas.shard_of(context)
        rejoin.joined(self.replicas, shard, int(request.server), request.address)
        return ps_pb2.JoinResponse()
