"""Node credentials at the agent gateway: the enrollment answer carries the expiry, the
agent renews over `POST /api/v1/agent/credential/`, an admin revokes through the API or
the admin and the node's socket is closed (4401) at once."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client, override_settings
from rest_framework.test import APIClient
from trainhub.asgi import application
from trainhub.audit.models import AuditEntry
from trainhub.nodes.credentials import CREDENTIAL_REVOKED
from trainhub.nodes.models import Node
from trainhub.nodes.services import create_enrollment_token

from ps_runtime.agent.protocol import (
    CLOSE_UNAUTHORIZED,
    CREDENTIAL_PATH,
    DESIRED_TASKS_PATH,
    ENROLL_PATH,
    parse_enrolled,
    parse_renewed_credential,
)

from ..factories import make_node, make_user

FACTS = {"hostname": "cpu-9", "address": "10.0.0.9", "cpus": 4, "memory_mb": 8192}


def _as_node(credential: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {credential}")
    return client


def _admin() -> APIClient:
    client = APIClient()
    root = User.objects.filter(username="root").first() or make_user("root", superuser=True)
    client.force_authenticate(root)
    return client


@pytest.mark.django_db
def test_the_enrollment_answer_says_when_the_credential_expires() -> None:
    token = create_enrollment_token()
    response = APIClient().post(ENROLL_PATH, {**FACTS, "token": token.secret}, format="json")
    assert response.status_code == 201, response.content
    enrolled = parse_enrolled(response.json())
    node = Node.objects.get(pk=enrolled.node_id)
    assert enrolled.credential_expires_at == node.credential_expires_at


@pytest.mark.django_db
def test_an_agent_renews_with_its_current_credential() -> None:
    node, old = make_node()
    response = _as_node(old).post(CREDENTIAL_PATH)
    assert response.status_code == 200, response.content
    renewed = parse_renewed_credential(response.json())
    node.refresh_from_db()
    assert renewed.credential_expires_at == node.credential_expires_at
    assert renewed.credential != old
    assert _as_node(renewed.credential).get(DESIRED_TASKS_PATH).status_code == 200
    assert _as_node(old).get(DESIRED_TASKS_PATH).status_code == 200  # the overlap
    assert APIClient().post(CREDENTIAL_PATH).status_code == 401
    assert _as_node(f"{node.pk}.wrong").post(CREDENTIAL_PATH).status_code == 401


@pytest.mark.django_db
def test_platform_admins_revoke_a_node_credential_over_the_api() -> None:
    node, credential = make_node()
    _, other_credential = make_node("cpu-2")
    member = APIClient()
    member.force_authenticate(make_user("alice"))
    url = f"/api/v1/nodes/{node.pk}/revoke-credential/"
    assert member.post(url).status_code == 403
    assert _admin().get(f"/api/v1/nodes/{node.pk}/").json()["credential_revoked_at"] is None

    response = _admin().post(url)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["credential_revoked_at"] is not None and body["alive"] is False
    assert body["credential_expires_at"] is not None
    refused = _as_node(credential).get(DESIRED_TASKS_PATH)
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
    assert _as_node(credential).post(CREDENTIAL_PATH).status_code == 401
    assert _as_node(other_credential).get(DESIRED_TASKS_PATH).status_code == 200
    assert AuditEntry.objects.filter(action=CREDENTIAL_REVOKED).count() == 1


@pytest.mark.django_db
def test_the_admin_action_revokes_the_selected_nodes_only() -> None:
    chosen, credential = make_node()
    kept, kept_credential = make_node("cpu-2")
    client = Client()
    client.force_login(make_user("root", superuser=True))
    response = client.post(
        "/admin/nodes/node/",
        {"action": "revoke_credential", "_selected_action": [str(chosen.pk)]},
    )
    assert response.status_code == 302
    chosen.refresh_from_db()
    kept.refresh_from_db()
    assert chosen.credential_revoked_at is not None and kept.credential_revoked_at is None
    assert _as_node(credential).get(DESIRED_TASKS_PATH).status_code == 401
    assert _as_node(kept_credential).get(DESIRED_TASKS_PATH).status_code == 200


def _socket(credential: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Node {credential}".encode())]
    )


@pytest.mark.django_db(transaction=True)
def test_revoking_closes_the_nodes_socket_at_once() -> None:
    node, credential = make_node()
    _, other_credential = make_node("cpu-2")
    admin = _admin()

    async def scenario() -> None:
        agent, bystander = _socket(credential), _socket(other_credential)
        assert (await agent.connect())[0] and (await bystander.connect())[0]
        response = await database_sync_to_async(admin.post)(
            f"/api/v1/nodes/{node.pk}/revoke-credential/"
        )
        assert response.status_code == 200
        closed = await agent.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHORIZED}
        assert await bystander.receive_nothing(timeout=0.3)
        await bystander.disconnect(timeout=10)
        # Reconnecting with the revoked credential is refused too.
        connected, code = await _socket(credential).connect()
        assert not connected and code == CLOSE_UNAUTHORIZED

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_socket_whose_credential_expired_is_closed_at_its_next_message() -> None:
    with override_settings(NODE_CREDENTIAL_DAYS=1.5 / 86400):  # 1.5 s
        _, credential = make_node()

    async def scenario() -> None:
        agent = _socket(credential)
        assert (await agent.connect())[0]
        heartbeat: dict[str, Any] = {"type": "heartbeat", "usage": {}, "tasks": []}
        await agent.send_json_to(heartbeat)
        assert await agent.receive_nothing(timeout=0.2)
        time.sleep(1.6)
        await agent.send_json_to(heartbeat)
        closed = await agent.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHORIZED}

    async_to_sync(scenario)()
    assert isinstance(Node.objects.get().credential_expires_at, datetime)
