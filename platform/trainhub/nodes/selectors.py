"""Read-side questions about nodes: what state a person should see, which agent runs there.

The state shown joins what an admin set (`Node.state`) with liveness: a node not heard
from within `NODE_LOST_AFTER_SECONDS` is "lost" whatever its admin state, exactly the
nodes `Node.objects.lost(now)` returns and the scheduler releases.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from .choices import NodeState
from .models import Node


class NodeStatus(StrEnum):
    READY = "ready"  # active and alive: the scheduler places tasks here
    CORDONED = "cordoned"
    DRAINING = "draining"
    LOST = "lost"


_BY_STATE = {
    NodeState.ACTIVE: NodeStatus.READY,
    NodeState.CORDONED: NodeStatus.CORDONED,
    NodeState.DRAINING: NodeStatus.DRAINING,
}


def node_status(node: Node, now: datetime) -> NodeStatus:
    """Ready, cordoned, draining or lost (not heard from in time: wins over the others)."""
    if not node.is_alive(now):
        return NodeStatus.LOST
    return _BY_STATE.get(NodeState(node.state), NodeStatus.CORDONED)


def agent_version(node: Node) -> str | None:
    """The version the node's agent reports, when it reports one (a field of the node, or
    `agent_version` in its last heartbeat's usage); None otherwise."""
    version = getattr(node, "agent_version", None) or (node.usage or {}).get("agent_version")
    return str(version) if version not in (None, "") else None
