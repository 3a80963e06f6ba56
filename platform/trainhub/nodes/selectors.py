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
    """The trainhub-runtime version the node's agent reported last; None when it never
    reported one (an agent older than the field)."""
    return node.agent_version or None


def agent_outdated(node: Node, server_version: str | None) -> bool:
    """The node's agent runs another runtime version than this server (`server_version`,
    from `ps_runtime.version.known_runtime_version()`); False while either is unknown."""
    version = agent_version(node)
    return None not in (version, server_version) and version != server_version
