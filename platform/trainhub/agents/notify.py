"""Telling node agents that their desired tasks changed, over the channel layer.

`on_event` is one of `settings.EVENT_HANDLERS`: lower layers publish
`NodeTasksChanged` after their transaction commits, and each affected node's
`AgentConsumer` (in the group `node_group(node_id)`) sends its agent `tasks_changed`.
A `NodeChanged` for a revoked credential makes the node's consumers close their sockets.
A `StacksWanted` (a job stalled) makes them send their agents `capture_stacks`.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from trainhub.events import Event, NodeChanged, NodeTasksChanged, StacksWanted
from trainhub.nodes.credentials import CREDENTIAL_REVOKED

# The channel-layer message a node group gets; `AgentConsumer.tasks_changed` handles it.
TASKS_CHANGED = "tasks.changed"
# The message that makes `AgentConsumer.credential_revoked` close the socket (4401).
CREDENTIAL_REVOKED_NOTICE = "credential.revoked"
# The message that makes `AgentConsumer.stacks_wanted` send `capture_stacks` (a stall).
STACKS_WANTED = "stacks.wanted"


def node_group(node_id: int) -> str:
    """The channel-layer group of the agent socket(s) of one node."""
    return f"node-{node_id}"


def on_event(event: Event) -> None:
    """Ask the agents of the nodes in a `NodeTasksChanged` to reconcile, those of a
    `StacksWanted` for a stalled job's stacks, and close the sockets of a node whose
    credential was revoked; other events and a missing channel layer are no-ops."""
    revoked = isinstance(event, NodeChanged) and event.reason == CREDENTIAL_REVOKED
    if not (revoked or isinstance(event, NodeTasksChanged | StacksWanted)):
        return
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(event, StacksWanted):
        for node_id in sorted(set(event.node_ids)):
            notice = {"type": STACKS_WANTED, "job_id": event.job_id}
            async_to_sync(layer.group_send)(node_group(node_id), notice)
        return
    if isinstance(event, NodeChanged):
        async_to_sync(layer.group_send)(
            node_group(event.node_id), {"type": CREDENTIAL_REVOKED_NOTICE}
        )
        return
    assert isinstance(event, NodeTasksChanged)
    for node_id in sorted(set(event.node_ids)):
        async_to_sync(layer.group_send)(node_group(node_id), {"type": TASKS_CHANGED})
