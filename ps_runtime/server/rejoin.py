"""How a PS server gets back into its shards' replica sets (see `replication`).

1. the replacement marks its shards *syncing*: it refuses clients (UNAVAILABLE, so they
   use another replica) and keeps the updates it is forwarded for later;
2. it asks a live replica for a copy (CopyShard). That source first adds it as a
   *joiner*, then takes the copy with no update half-applied. From then on the source
   forwards it every update it applies, also those it was itself forwarded;
3. it loads the copy (values, optimizer slots and the push log), replays what it kept
   (the push log skips what the copy already holds) and starts serving;
4. it tells the other replicas it has joined, the source last. A replica that gets
   Join first lets its updates in flight reach the source, so none of them misses the
   replacement.

Both calls carry the address the replacement listens on: a server moved to another node
keeps its index, and its peers learn its new address from them before they forward it
anything (the cluster file they are given may change later, or not at all).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator

import grpc

from ps_runtime.proto import ps_pb2
from ps_runtime.server import checkpoint
from ps_runtime.server.replication import ReplicaSet, Shard
from ps_runtime.shards.replicas import NoLiveReplica

log = logging.getLogger(__name__)

COPY_PIECE_BYTES = 1 << 20
REJOIN_TIMEOUT_S = 30.0


def copy_out(
    replicas: ReplicaSet, shard: Shard, joiner: int, address: str = ""
) -> Iterator[ps_pb2.ShardPiece]:
    """A consistent copy of `shard` for `joiner` (at `address`), forwarded every later
    update."""
    replicas.move(joiner, address)
    replicas.reconnect(joiner)
    with shard.lock:
        shard.live.discard(joiner)
        shard.joining.add(joiner)
    buffer = io.BytesIO()
    with shard.applying.quiet():
        checkpoint.write_shard(shard.store, buffer, shard.index, replicas.replicas.servers, step=0)
        push_log = shard.store.push_log.dump()
    data = buffer.getbuffer()
    for start in range(0, len(data), COPY_PIECE_BYTES):
        yield ps_pb2.ShardPiece(data=bytes(data[start : start + COPY_PIECE_BYTES]))
    yield ps_pb2.ShardPiece(push_log=push_log)


def joined(replicas: ReplicaSet, shard: Shard, server: int, address: str = "") -> None:
    """`server` (at `address`) holds the whole shard: forward it updates as to any replica."""
    replicas.move(server, address)
    with shard.lock:
        back = server not in shard.live and server not in shard.joining
    if back:
        replicas.reconnect(server)
    with shard.routing.quiet():  # updates in flight reach the source first
        with shard.lock:
            shard.joining.discard(server)
            shard.live.add(server)


def rejoin(replicas: ReplicaSet, replacement: bool, timeout: float = REJOIN_TIMEOUT_S) -> None:
    """Copy every shard held here from a live replica (steps 2 to 4 above).

    A first start finds no replica with anything and starts empty. A replacement that
    finds none within `timeout` raises: its shards' updates are lost, and only a restart
    from a checkpoint can bring them back.
    """
    for shard in replicas.shards.values():
        shard.syncing = True
    deadline = time.monotonic() + timeout
    pending = list(replicas.shards.values())
    while pending:
        for shard in list(pending):
            source = _copy_in(replicas, shard)
            if source is not None:
                _announce(replicas, shard, source)
            elif not replacement:
                _serve(shard)
            else:
                continue
            pending.remove(shard)
        if pending:
            if time.monotonic() > deadline:
                raise NoLiveReplica(
                    f"parameter server {replicas.index}: no live replica of shards "
                    f"{[s.index for s in pending]} to copy from within {timeout:.0f}s"
                )
            time.sleep(0.2)


def _copy_in(replicas: ReplicaSet, shard: Shard) -> int | None:
    me = replicas.index
    for source in replicas.replicas.chain(shard.index):
        if source == me:
            continue
        request = ps_pb2.CopyShardRequest(
            shard=shard.index, server=me, address=replicas.addresses[me]
        )
        try:
            pieces = replicas.stub(source).CopyShard(
                request, metadata=replicas.metadata(shard.index, forwarded=False), timeout=60
            )
            data, push_log = bytearray(), ""
            for piece in pieces:
                data += piece.data
                push_log = piece.push_log or push_log
        except grpc.RpcError as e:
            log.info("shard %d: no copy from server %d (%s)", shard.index, source, e.code())
            continue
        with shard.lock:
            count = checkpoint.restore_copy(
                shard.store, io.BytesIO(bytes(data)), shard.index, replicas.replicas.servers
            )
            shard.store.push_log.load(push_log)
        kept = _serve(shard)
        log.info(
            "shard %d: copied %d variables (%d bytes) from server %d, then %d updates",
            shard.index,
            count,
            len(data),
            source,
            kept,
        )
        return source
    return None


def _serve(shard: Shard) -> int:
    """Apply what was forwarded while syncing and start serving; return how many."""
    with shard.lock:
        kept = len(shard.kept)
        for apply in shard.kept:
            try:
                apply(shard.store)
            except Exception as e:  # the replica that sent it applied it alike
                log.error("shard %d: a forwarded update failed here: %s", shard.index, e)
        shard.kept.clear()
        shard.syncing = False
    return kept


def _announce(replicas: ReplicaSet, shard: Shard, source: int) -> None:
    me = replicas.index
    others = [p for p in replicas.replicas.chain(shard.index) if p not in (me, source)]
    for peer in [*others, source]:
        try:
            replicas.stub(peer).Join(
                ps_pb2.JoinRequest(shard=shard.index, server=me, address=replicas.addresses[me]),
                metadata=replicas.metadata(shard.index, forwarded=False),
                timeout=10,
                wait_for_ready=True,  # not refused while the channel reconnects
            )
        except grpc.RpcError as e:
            # Down, or restarting: a forward that fails drops it, and it comes back by
            # copying the shard and joining like this server did.
            log.warning(
                "shard %d: server %d did not take the join: %s", shard.index, peer, e.code()
            )
        else:
            with shard.lock:
                shard.live.add(peer)
