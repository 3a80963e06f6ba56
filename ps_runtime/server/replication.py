"""The shards one PS server holds, and how their replicas stay in step.

A server holds its own shard and backs up the `replication` shards before it (see
`replicas`). Updates it takes from a client it forwards to the shard's other live
replicas, applies meanwhile, and answers when all are done; forwarded ones it only
applies. A replica that stops answering is dropped from the forwarding set; it comes
back only by rejoining (`rejoin`): it copies the shard from a live replica and joins.
A server that moved (a new address for its index) says so when it copies and joins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.server.store import ParameterStore
from ps_runtime.shards.replicas import (
    FORWARDED_KEY,
    SHARD_KEY,
    Replicas,
    metadata_value,
    shard_metadata,
)
from ps_runtime.wire import rpc

log = logging.getLogger(__name__)

# A peer that refuses a forward at once (its channel may still be waiting out a
# reconnect backoff) is given this long to take it before it counts as down.
PEER_GRACE_S = 0.5
# How a server forwards an update: (peer server, metadata, grace) -> a future of its
# answer; a grace > 0 asks for wait_for_ready with that deadline.
Forward = Callable[[int, tuple[tuple[str, str], ...], float], "Future[Any]"]
Apply = Callable[[ParameterStore], Any]


class Gate:
    """Counts updates in progress; `quiet()` waits them out and holds new ones meanwhile."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self._closed = False

    @contextmanager
    def update(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._cond.notify_all()

    @contextmanager
    def quiet(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._closed = True
            while self._busy:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


@dataclass
class Shard:
    """One shard held here, with the replicas updates are forwarded to."""

    index: int
    store: ParameterStore = field(default_factory=ParameterStore)
    syncing: bool = False
    kept: list[Apply] = field(default_factory=list)  # forwarded while syncing
    live: set[int] = field(default_factory=set)  # full replicas
    joining: set[int] = field(default_factory=set)  # copying from here, not joined yet
    lock: threading.Lock = field(default_factory=threading.Lock)  # the fields above
    applying: Gate = field(default_factory=Gate)  # local applies (quiet for a copy)
    routing: Gate = field(default_factory=Gate)  # client updates being forwarded


class ReplicaSet:
    """The shards of server `index` among `addresses`, and its channels to the others."""

    def __init__(
        self,
        index: int,
        addresses: tuple[str, ...],
        replication: int,
        token: str,
        client_updates: int = 3,
    ) -> None:
        self.index = index
        self.addresses = addresses
        self.replicas = Replicas(len(addresses), replication)
        self._metadata = rpc.auth_metadata(token)
        self.shards: dict[int, Shard] = {}
        for s in self.replicas.hosted(index):
            peers = set(self.replicas.chain(s)) - {index}
            self.shards[s] = Shard(s, live=peers)
        self._channels: dict[int, grpc.Channel] = {}
        self._stubs: dict[int, Any] = {}
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()  # guards _channels, _stubs and _streams
        # Client updates applied and forwarded at once; the other handler threads stay
        # free for the updates peers forward here.
        self._client_updates = threading.BoundedSemaphore(client_updates)

    @classmethod
    def alone(cls, index: int, token: str) -> ReplicaSet:
        """A server without replicas: it holds shard `index` only."""
        return cls(index, ("",) * (index + 1), 0, token)

    @property
    def replication(self) -> int:
        return self.replicas.replication

    def stub(self, server: int) -> Any:
        """The generated stub for another server of the job."""
        with self._lock:
            stub = self._stubs.get(server)
            if stub is None:
                channel = self._channels[server] = rpc.create_channel(self.addresses[server])
                stub = self._stubs[server] = ps_pb2_grpc.ParameterServerStub(channel)  # type: ignore[no-untyped-call]
                self._streams[server] = channel.stream_unary(
                    "/trainhub.ps.ParameterServer/PushDenseStream",
                    request_serializer=None,  # chunks are serialized already
                    response_deserializer=ps_pb2.PushResponse.FromString,
                )
            return stub

    def reconnect(self, server: int) -> None:
        """Open a new channel to `server` (back from the dead): the old one may be
        waiting out a reconnect backoff of up to a second. The old channel is not closed,
        which would cancel the calls still on it; it goes when they are done."""
        with self._lock:
            self._channels.pop(server, None)
            self._stubs.pop(server, None)
            self._streams.pop(server, None)

    def move(self, server: int, address: str) -> None:
        """`server` now listens at `address` (it moved, or a replacement took its place
        elsewhere): later calls to it go there."""
        with self._lock:
            if not address or address == self.addresses[server]:
                return
            old, self.addresses = (
                self.addresses[server],
                (
                    *self.addresses[:server],
                    address,
                    *self.addresses[server + 1 :],
                ),
            )
        log.warning("parameter server %d moved from %s to %s", server, old, address)
        self.reconnect(server)

    def push_stream(self, server: int) -> Any:
        """PushDenseStream to another server, taking serialized chunks."""
        self.stub(server)
        with self._lock:
            return self._streams[server]

    def metadata(self, shard: int, forwarded: bool = True) -> tuple[tuple[str, str], ...]:
        extra = ((FORWARDED_KEY, "1"),) if forwarded else ()
        return self._metadata + shard_metadata(shard) + extra

    # ------------------------------------------------------------ serving

    def shard_of(self, context: grpc.ServicerContext) -> Shard:
        """The shard a call is for (this server's own when the call names none)."""
        text = metadata_value(context, SHARD_KEY)
        index = (
            self.index if text is None else int(text) if text.isascii() and text.isdigit() else -1
        )
        shard = self.shards.get(index)
        if shard is None:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"parameter server {self.index} does not hold shard {text}; it holds "
                f"{sorted(self.shards)}",
            )
        assert shard is not None
        return shard

    def for_client(self, shard: Shard, context: grpc.ServicerContext) -> None:
        """Refuse a client's call while the shard is still being copied here."""
        if shard.syncing:
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"shard {shard.index} is being copied to parameter server {self.index}; "
                "its other replicas answer meanwhile",
            )

    def update(
        self, context: grpc.ServicerContext, apply: Apply, forward: Forward, empty: Any
    ) -> Any:
        """Apply an update here and on the shard's other replicas; return the local answer.

        A forwarded update is applied only (kept for later while syncing), and passed on
        only to joiners, which may not get it from its first sender.
        """
        shard = self.shard_of(context)
        if metadata_value(context, FORWARDED_KEY) == "1":
            with shard.lock:
                if shard.syncing:
                    shard.kept.append(apply)
                    return empty
            with shard.applying.update():
                answer = apply(shard.store)
            with shard.lock:
                joiners = set(shard.joining)
            self._forward(shard, joiners, forward)
            return answer
        self.for_client(shard, context)
        with self._client_updates, shard.routing.update():
            # The replicas apply while this server does: the call takes the longer of
            # the two, not their sum.
            with shard.lock:
                first = shard.live | shard.joining
            calls = self._send(shard, first, forward)
            with shard.applying.update():
                answer = apply(shard.store)
            with shard.lock:  # read after applying: a joiner added since gets it too
                later = (shard.live | shard.joining) - first
            self._settle(shard, calls + self._send(shard, later, forward), forward)
        return answer

    def _forward(self, shard: Shard, targets: set[int], forward: Forward) -> None:
        self._settle(shard, self._send(shard, targets, forward), forward)

    def _send(
        self, shard: Shard, targets: set[int], forward: Forward
    ) -> list[tuple[int, Future[Any]]]:
        metadata = self.metadata(shard.index)
        return [(t, forward(t, metadata, 0.0)) for t in sorted(targets)]

    def _settle(self, shard: Shard, calls: list[tuple[int, Future[Any]]], forward: Forward) -> None:
        """Wait for forwarded calls; a replica that does not answer is dropped."""
        metadata = self.metadata(shard.index)
        for target, call in calls:
            try:
                try:
                    call.result()
                except grpc.RpcError as e:
                    if e.code() not in rpc.NOT_OURS:
                        raise
                    forward(target, metadata, PEER_GRACE_S).result()
            except grpc.RpcError as e:
                if e.code() in rpc.NOT_OURS or e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    log.warning(
                        "shard %d: replica %d does not answer; updates go on without it "
                        "until it rejoins",
                        shard.index,
                        target,
                    )
                    with shard.lock:
                        shard.live.discard(target)
                        shard.joining.discard(target)
                else:
                    log.error("shard %d: replica %d refused an update: %s", shard.index, target, e)
