"""Heartbeats: a node seen, its usage, isolation and agent version, one at a time or a
batch per gateway flush (`trainhub.agents.services.apply_heartbeats`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from .models import Node


def record_heartbeat(
    *,
    node_id: int,
    usage: dict[str, Any],
    now: datetime,
    isolation: str | None = None,
    agent_version: str | None = None,
) -> None:
    """Mark the node seen; `isolation` and `agent_version` (when the agent reports them)
    replace the known ones."""
    fields: dict[str, Any] = {"last_seen": now, "usage": usage}
    if isolation is not None:
        fields["isolation"] = isolation
    if agent_version is not None:
        fields["agent_version"] = agent_version
    Node.objects.filter(pk=node_id).update(**fields)


@dataclass(frozen=True)
class HeartbeatRecord:
    """What `record_heartbeat` takes, for `record_heartbeats`."""

    node_id: int
    usage: dict[str, Any]
    now: datetime
    isolation: str | None = None
    agent_version: str | None = None


def record_heartbeats(records: list[HeartbeatRecord]) -> None:
    """`record_heartbeat` for many nodes at once, in one UPDATE.

    On PostgreSQL the rows come in as arrays (`unnest`): Django's `bulk_update` builds a
    CASE expression per field and row, and resolving it cost a web process a fifth of its
    CPU at 1,000 agents.
    """
    if not records:
        return
    if connection.vendor != "postgresql":
        _record_heartbeats_portably(records)
        return
    records = sorted(records, key=lambda r: r.node_id)
    q = connection.ops.quote_name
    sql = (
        f"UPDATE {q(Node._meta.db_table)} AS n SET last_seen = v.seen, usage = v.usage,"
        " isolation = COALESCE(v.isolation, n.isolation),"
        " agent_version = COALESCE(v.version, n.agent_version)"
        " FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[]::jsonb[], %s::text[],"
        " %s::text[]) AS v(id, seen, usage, isolation, version) WHERE n.id = v.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                [r.node_id for r in records],
                [r.now for r in records],
                [json.dumps(r.usage) for r in records],
                [r.isolation for r in records],
                [r.agent_version for r in records],
            ],
        )


def _record_heartbeats_portably(records: list[HeartbeatRecord]) -> None:
    """`record_heartbeats` on SQLite (standalone): one bulk UPDATE per set of fields."""
    groups: dict[tuple[bool, bool], list[Node]] = {}
    for r in records:
        node = Node(
            pk=r.node_id,
            last_seen=r.now,
            usage=r.usage,
            isolation=r.isolation or "",
            agent_version=r.agent_version or "",
        )
        groups.setdefault((r.isolation is not None, r.agent_version is not None), []).append(node)
    for (isolation, version), nodes in groups.items():
        fields = ["last_seen", "usage"]
        fields += ["isolation"] if isolation else []
        fields += ["agent_version"] if version else []
        Node.objects.bulk_update(nodes, fields)
