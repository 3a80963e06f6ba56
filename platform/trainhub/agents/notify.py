"""Telling node agents that their desired tasks changed, over the channel layer.

`on_event` is one of `settings.EVENT_HANDLERS`: lower layers publish
`NodeTasksChanged` after their transaction commits, and each affected node's
`AgentConsumer` (in the group `node_group(node_id)`) sends its agent `tasks_changed`.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from trainhub.events import Event, NodeTasksChanged

# The channel-layer message a node group gets; `AgentConsumer.tasks_changed` handles it.
TASKS_CHANGED = "tasks.changed"


def node_group(node_id: int) -> str:
    """The channel-layer group of the agent socket(s) of one node."""
    return f"node-{node_id}"


def on_event(event: Event) -> None:
    """Ask the agents of the nodes in a `NodeTasksChanged` to reconcile; other events and
    a missing channel layer are no-ops."""
    if not isinstance(event, NodeTasksChanged):
        return
    layer = get_channel_layer()
    if layer is None:
        return
    for node_id in sorted(set(event.node_ids)):
        async_to_sync(layer.group_send)(node_group(node_id), {"type": TASKS_CHANGED})
