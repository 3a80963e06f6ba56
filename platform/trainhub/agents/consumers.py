"""The `/ws/agent/` endpoint: one long-lived socket per node agent."""

from __future__ import annotations

import logging
from datetime import datetime
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
from trainhub.nodes.credentials import check_node_credential
from trainhub.nodes.services import record_heartbeat

from .authentication import credential_from_header
from .notify import node_group
from .services import handle_message

logger = logging.getLogger(__name__)


class AgentConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """One node agent's socket: messages up go to `handle_message`, notices come down."""

    node_id: int | None = None
    # When the credential this socket was opened with expires (None: never); a message
    # after it closes the socket with 4401, so an agent that stopped renewing is refused.
    valid_until: datetime | None = None

    async def connect(self) -> None:
        headers = dict(self.scope.get("headers", []))
        raw = headers.get(b"authorization", b"").decode("latin-1")
        credential = credential_from_header(raw)
        login = (
            await database_sync_to_async(check_node_credential)(credential) if credential else None
        )
        if login is None:
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        node = login.node
        self.node_id = node.pk
        self.valid_until = login.valid_until
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
        if self.valid_until is not None and timezone.now() >= self.valid_until:
            logger.info("credential of node %s expired; closing its socket", self.node_id)
            await self.close(code=CLOSE_UNAUTHORIZED)
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

    async def credential_revoked(self, event: dict[str, Any]) -> None:
        """The channel-layer notice `notify.CREDENTIAL_REVOKED_NOTICE`: refuse the agent."""
        logger.info("credential of node %s revoked; closing its socket", self.node_id)
        await self.close(code=CLOSE_UNAUTHORIZED)
