"""Which PS server a client asks for each shard, and failover to the shard's backups.

Without replication shard `s` is server `s`, and a push retries transport errors there
(the origin makes a retry harmless). With replication the client sticks to one replica
of each shard, the primary at first; when it stops answering (`rpc.SERVER_GONE`), or
another job's server answers at its address (`rpc.NOT_OURS`), the client
moves on to the next server of the shard's chain and repeats the call there, with the
same origin for a push, so an update the dead server forwarded before it died is not
applied twice. A restarted server is not asked again until the one answering fails: it
serves as a backup.

A server of a replicated job may move to another address while the job runs (`move`):
calls already on their way to the old address finish or fail there (and fail over like
any other), later ones go to the new one.

Data calls travel on each server's data stream (`streams`) and fail with the same
status codes as unary calls, so the rules here hold for both.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from ps_runtime.client.streams import DataStream
from ps_runtime.proto import ps_pb2, ps_pb2_grpc
from ps_runtime.shards.replicas import Replicas, next_in_chain, shard_metadata
from ps_runtime.wire import chunks, rpc

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Without replication, a pull (a read) or a push (made safe by its origin) that found no
# server is tried again on the same one up to 3 more times, the waits doubling from 0.5 s
# (0.25 s for a call already started): a server still starting, or one a loaded machine
# was slow to answer, is waited for past gRPC's first reconnect backoff (about 1 s); a
# server that is gone fails the call within a few seconds.
TRANSPORT_ATTEMPTS = 4
RETRY_BACKOFF_S = 0.5
# How long a call keeps trying a shard's replicas when none answers (a replacement
# copying the shard, or every replica down).
FAILOVER_S = 30.0
_SERVICE = "/trainhub.ps.ParameterServer"


@dataclass(frozen=True)
class Server:
    """A client's channel to one PS server, with the stub and the bulk streams on it."""

    address: str
    channel: grpc.Channel
    stub: Any
    pull: Any  # PullDenseStream, decoding chunks without the generated classes (`chunks`)
    push: Any  # PushDenseStream, taking serialized chunks
    data: DataStream  # the data calls, multiplexed on one stream

    @classmethod
    def connect(cls, address: str, auth: tuple[tuple[str, str], ...]) -> Server:
        channel = rpc.create_channel(address)
        return cls(
            address,
            channel,
            # grpcio-tools writes the stub modules without type hints.
            ps_pb2_grpc.ParameterServerStub(channel),  # type: ignore[no-untyped-call]
            channel.unary_stream(
                f"{_SERVICE}/PullDenseStream",
                request_serializer=ps_pb2.PullDenseRequest.SerializeToString,
                response_deserializer=chunks.decode_chunk,
            ),
            channel.stream_unary(
                f"{_SERVICE}/PushDenseStream",
                request_serializer=None,
                response_deserializer=ps_pb2.PushResponse.FromString,
            ),
            DataStream(channel, address, auth),
        )

    def close(self) -> None:
        self.data.close()
        self.channel.close()


class Routes:
    """The server answering for each shard, per client."""

    def __init__(self, addresses: Sequence[str], token: str, replication: int = 0) -> None:
        self.replicas = Replicas(len(addresses), replication)
        auth = self._auth = rpc.auth_metadata(token)
        self.servers = [Server.connect(a, auth) for a in addresses]
        self.metadata = [auth + shard_metadata(s) for s in range(len(addresses))]
        self._current = list(range(len(addresses)))
        self._lock = threading.Lock()  # guards _current

    @property
    def replication(self) -> int:
        return self.replicas.replication

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(s.address for s in self.servers)

    def move(self, addresses: Sequence[str]) -> None:
        """Servers now at other addresses (same count, same order): connect to them."""
        if len(addresses) != len(self.servers):
            raise ValueError(
                f"{len(addresses)} PS addresses for {len(self.servers)} servers: a job's "
                "servers move, they are not added or removed"
            )
        for i, address in enumerate(addresses):
            old = self.servers[i]
            if address != old.address:
                # The old channel is left to the calls still on it (closing it would
                # cancel them); it goes when they are done.
                self.servers[i] = Server.connect(address, self._auth)
                log.warning("parameter server %d moved from %s to %s", i, old.address, address)

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def server(self, shard: int) -> int:
        """The server this client asks for `shard` now."""
        with self._lock:
            return self._current[shard]

    def failed(self, shard: int, server: int) -> None:
        """`server` did not answer for `shard`: ask the next replica from now on."""
        with self._lock:
            if self._current[shard] != server:
                return  # another call moved on already
            self._current[shard] = nxt = next_in_chain(self.replicas.chain(shard), server)
        log.warning(
            "shard %d: server %d (%s) does not answer; using server %d (%s)",
            shard,
            server,
            self.addresses[server],
            nxt,
            self.addresses[nxt],
        )

    def call(self, shard: int, fn: Callable[[int], T], attempts: int = 1) -> T:
        """`fn(server)` on the server for `shard`, failing over along its chain.

        Without replication, transport errors are retried `attempts` times on the same
        server (pushes: their origin makes it safe).
        """
        if not self.replication:
            for attempt in range(1, attempts + 1):
                try:
                    return fn(shard)
                except grpc.RpcError as e:
                    if e.code() not in RETRYABLE or attempt == attempts:
                        raise
                    time.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
            raise AssertionError("unreachable")
        deadline = time.monotonic() + FAILOVER_S
        tried = 0
        refused: set[int] = set()  # servers that refused the token: another job's, or ours
        while True:
            server = self.server(shard)
            try:
                return fn(server)
            except grpc.RpcError as e:
                if e.code() not in rpc.NOT_OURS or time.monotonic() > deadline:
                    raise
                if e.code() == rpc.REFUSED:
                    refused.add(server)
                    if len(refused) > self.replication:
                        raise  # every replica refuses it: the token is wrong
                self.failed(shard, server)
                tried += 1
                if tried % (self.replication + 1) == 0:
                    time.sleep(0.1)  # no replica answered: give a replacement time

    def settle(
        self, shard: int, server: int, future: Any, again: Callable[[int], T], attempts: int = 1
    ) -> T:
        """The result of a call started on `server`; when it failed for want of a server,
        `again(server)` through `call`."""
        try:
            result: T = future.result()
            return result
        except grpc.RpcError as e:
            if self.replication:
                if e.code() not in rpc.NOT_OURS:
                    raise
                self.failed(shard, server)
                return self.call(shard, again)
            if e.code() not in RETRYABLE or attempts == 1:
                raise
            time.sleep(RETRY_BACKOFF_S / 2)
            return self.call(shard, again, attempts - 1)
