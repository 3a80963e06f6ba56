"""The `/ws/agent/` endpoint: one long-lived socket per node agent."""

from __future__ import annotations

import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.utils import timezone

from ps_runtime.agent.protocol import (
    CLOSE_UNAUTHORIZED,
    ErrorMessage,
    ProtocolError,
    TasksChanged,
)
from trainhub.nodes.services import authenticate_node, record_heartbeat

from .authentication import credential_from_header
from .notify import node_group
from .services import handle_message

logger = logging.getLogger(__name__)


class AgentConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """One node agent's socket: messages up go to `handle_message`, notices come down."""

    node_id: int | None = None

    async def connect(self) -> None:
        headers = dict(self.scope.get("headers", []))
        raw = headers.get(b"authorization", b"").decode("latin-1")
        credential = credential_from_header(raw)
        node = await database_sync_to_async(authenticate_node)(credential) if credential else None
        if node is None:
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.node_id = node.pk
        await self.channel_layer.group_add(node_group(node.pk), self.channel_name)
        await self.accept()
        await database_sync_to_async(record_heartbeat)(
            node_id=node.pk, usage=node.usage, now=timezone.now()
        )
        logger.info("agent of node %s connected", node.pk)

    async def disconnect(self, code: int) -> None:
        if self.node_id is not None:
            await self.channel_layer.group_discard(node_group(self.node_id), self.channel_name)
            logger.info("agent of node %s disconnected (%s)", self.node_id, code)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.node_id is None:
            return
        try:
            await database_sync_to_async(handle_message)(
                node_id=self.node_id, message=content, now=timezone.now()
            )
        except ProtocolError as exc:
            kind = content.get("type") if isinstance(content, dict) else None
            logger.warning("node %s sent a bad %r message: %s", self.node_id, kind, exc)
            await self.send_json(ErrorMessage(str(exc)).to_wire())

    async def tasks_changed(self, event: dict[str, Any]) -> None:
        """The channel-layer notice `notify.TASKS_CHANGED`, passed on to the agent."""
        await self.send_json(TasksChanged().to_wire())
