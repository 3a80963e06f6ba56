"""An agent socket checks its credential again by itself (issue 26, item 3): a node
revoked while the channel-layer notice is lost is closed (4401) at a later message."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from trainhub.agents import consumers
from trainhub.asgi import application
from trainhub.nodes.models import Node

from ps_runtime.agent.protocol import CLOSE_UNAUTHORIZED

from ..factories import make_node

HEARTBEAT: dict[str, Any] = {"type": "heartbeat", "usage": {}, "tasks": []}


def _socket(credential: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Node {credential}".encode())]
    )


def _revoke_without_notice(node_id: int) -> None:
    """What `revoke_node_credential` writes, without the `NodeChanged` that tells sockets."""
    Node.objects.filter(pk=node_id).update(credential_revoked_at=timezone.now())


@pytest.mark.django_db(transaction=True)
def test_a_revoked_nodes_socket_closes_at_its_next_heartbeat_without_the_notice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumers, "CREDENTIAL_RECHECK_SECONDS", 0.0, raising=False)
    node, credential = make_node()
    _, other_credential = make_node("cpu-2")

    async def scenario() -> None:
        agent, bystander = _socket(credential), _socket(other_credential)
        assert (await agent.connect())[0] and (await bystander.connect())[0]
        await agent.send_json_to(HEARTBEAT)
        assert await agent.receive_nothing(timeout=0.2)
        await database_sync_to_async(_revoke_without_notice)(node.pk)
        assert await agent.receive_nothing(timeout=0.3)  # no notice came
        await agent.send_json_to(HEARTBEAT)
        closed = await agent.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHORIZED}
        await bystander.send_json_to(HEARTBEAT)
        assert await bystander.receive_nothing(timeout=0.3)
        await bystander.disconnect(timeout=10)

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_the_credential_is_checked_again_once_per_interval_not_per_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumers, "CREDENTIAL_RECHECK_SECONDS", 1.0, raising=False)
    node, credential = make_node()

    async def scenario() -> None:
        agent = _socket(credential)
        assert (await agent.connect())[0]
        await database_sync_to_async(_revoke_without_notice)(node.pk)
        await agent.send_json_to(HEARTBEAT)  # within the interval: not looked up yet
        assert await agent.receive_nothing(timeout=0.3)
        time.sleep(1.0)
        await agent.send_json_to(HEARTBEAT)
        closed = await agent.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHORIZED}

    async_to_sync(scenario)()
