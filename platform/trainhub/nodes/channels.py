"""Telling agents that their desired tasks changed (over the channel layer)."""

from __future__ import annotations

from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction


def node_group(node_id: int) -> str:
    return f"node-{node_id}"


def notify_tasks_changed(node_ids: Iterable[int]) -> None:
    """After the current transaction commits, ask these nodes' agents to reconcile."""
    ids = sorted(set(node_ids))
    if not ids:
        return

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        for node_id in ids:
            async_to_sync(layer.group_send)(node_group(node_id), {"type": "tasks.changed"})

    transaction.on_commit(send)
