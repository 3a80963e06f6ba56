"""Where each shard's replicas live, and the call metadata that names a shard.

With `n` servers and replication `r` (0 <= r <= 2, r < n), shard `s` lives on servers
s, s+1, ..., s+r (mod n): its chain. The first live server of the chain a client knows
of answers for the shard; the others are backups that every update reaches before the
client's call returns. Shared by the client (`client.routes`) and the server (`server.replication`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc

SHARD_KEY = "x-ps-shard"  # which shard a call is for (a server may hold several)
FORWARDED_KEY = "x-ps-forwarded"  # "1": an update a replica forwards, not a client's
MAX_REPLICATION = 2


class NoLiveReplica(RuntimeError):
    """A replacement server found no replica to copy a shard from: the shard's updates
    are lost, and only a restart from a checkpoint brings them back (the task exits 75)."""


def check_replication(servers: int, replication: int) -> None:
    """ValueError unless 0 <= replication <= 2 and replication < servers."""
    if not 0 <= replication <= MAX_REPLICATION:
        raise ValueError(f"replication must be 0, 1 or 2, got {replication}")
    if replication and replication >= servers:
        raise ValueError(
            f"replication {replication} needs at least {replication + 1} parameter servers, "
            f"got {servers}: each shard lives on its primary and the next {replication}"
        )


@dataclass(frozen=True)
class Replicas:
    """The chains of `servers` servers with `replication` backups per shard."""

    servers: int
    replication: int = 0

    def __post_init__(self) -> None:
        check_replication(self.servers, self.replication)

    def chain(self, shard: int) -> tuple[int, ...]:
        """Servers holding `shard`, primary first."""
        return tuple((shard + k) % self.servers for k in range(self.replication + 1))

    def hosted(self, server: int) -> tuple[int, ...]:
        """Shards `server` holds: its own first, then those it backs up."""
        return tuple((server - k) % self.servers for k in range(self.replication + 1))


def shard_metadata(shard: int) -> tuple[tuple[str, str], ...]:
    """Metadata naming the shard a call is for."""
    return ((SHARD_KEY, str(shard)),)


def metadata_value(context: grpc.ServicerContext, key: str) -> str | None:
    """A call's metadata value for `key`, or None."""
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return str(v)
    return None


def next_in_chain(chain: Sequence[int], current: int) -> int:
    """The server after `current` in `chain`, wrapping around."""
    return chain[(chain.index(current) + 1) % len(chain)]
