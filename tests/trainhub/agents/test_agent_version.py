"""The version an agent reports reaches the node, the nodes API and the node pages, where
an agent running another version than the server is flagged."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.agents.services import ProtocolError, handle_message
from trainhub.nodes.models import Node
from trainhub.nodes.selectors import agent_outdated
from trainhub.nodes.services import create_enrollment_token

from ps_runtime.version import runtime_version

from ..factories import make_node, make_user

pytestmark = pytest.mark.django_db

ENROLL = "/api/v1/nodes/enroll/"
FACTS: dict[str, Any] = {"hostname": "n", "address": "10.0.0.1", "cpus": 4, "memory_mb": 4096}


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    cache.clear()  # enrollment is throttled


def _heartbeat(**extra: Any) -> dict[str, Any]:
    return {"type": "heartbeat", "usage": {"cpu_percent": 1.0}, "tasks": [], **extra}


def _enroll(**extra: Any) -> Any:
    token = create_enrollment_token().secret
    return APIClient().post(ENROLL, {"token": token, **FACTS, **extra}, format="json")


def test_enrollment_records_the_agents_version() -> None:
    response = _enroll(agent_version="0.1.0")
    assert response.status_code == 201, response.content
    assert Node.objects.get(pk=response.json()["node_id"]).agent_version == "0.1.0"


def test_an_agent_older_than_the_field_enrolls_with_no_version() -> None:
    response = _enroll()
    assert response.status_code == 201, response.content
    assert Node.objects.get(pk=response.json()["node_id"]).agent_version == ""


@pytest.mark.parametrize("bad", [1, 0.1, "", " 0.1.0", "0.1/0", "1" * 65, None, ["0.1.0"]])
def test_a_malformed_version_is_refused_by_name_and_nothing_enrolls(bad: Any) -> None:
    response = _enroll(agent_version=bad)
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["agent_version"]
    assert not Node.objects.exists()


def test_heartbeats_keep_the_latest_version_and_a_silent_agent_changes_nothing() -> None:
    node, _ = make_node()
    handle_message(node_id=node.pk, message=_heartbeat(agent_version="0.2.0"), now=timezone.now())
    node.refresh_from_db()
    assert node.agent_version == "0.2.0"
    handle_message(node_id=node.pk, message=_heartbeat(), now=timezone.now())
    node.refresh_from_db()
    assert node.agent_version == "0.2.0"


def test_a_malformed_version_in_a_heartbeat_is_refused_naming_the_field() -> None:
    node, _ = make_node()
    seen = Node.objects.get(pk=node.pk).last_seen
    with pytest.raises(ProtocolError) as info:
        handle_message(node_id=node.pk, message=_heartbeat(agent_version=2), now=timezone.now())
    assert str(info.value).startswith("agent_version ")
    node.refresh_from_db()
    assert (node.agent_version, node.last_seen) == ("", seen)


def test_the_api_flags_an_agent_of_another_version_as_outdated() -> None:
    current, _ = make_node("current")
    old, _ = make_node("old")
    make_node("unknown")
    Node.objects.filter(pk=current.pk).update(agent_version=runtime_version())
    Node.objects.filter(pk=old.pk).update(agent_version="0.0.1")
    client = APIClient()
    client.force_authenticate(make_user("alice"))  # any signed-in user reads nodes
    listed = {n["hostname"]: n for n in client.get("/api/v1/nodes/").json()["results"]}
    shown = {name: (n["agent_version"], n["outdated"]) for name, n in listed.items()}
    assert shown == {
        "current": (runtime_version(), False),
        "old": ("0.0.1", True),
        "unknown": (None, False),
    }
    one = client.get(f"/api/v1/nodes/{old.pk}/").json()
    assert (one["agent_version"], one["outdated"]) == ("0.0.1", True)


def test_nothing_is_flagged_while_either_version_is_unknown() -> None:
    node = Node(agent_version="0.0.1")
    assert agent_outdated(node, "0.1.0")
    assert not agent_outdated(node, "0.0.1")
    assert not agent_outdated(node, None)  # a server without a version of its own
    assert not agent_outdated(Node(agent_version=""), "0.1.0")


def test_the_node_pages_flag_an_outdated_agent() -> None:
    current, _ = make_node("current")
    old, _ = make_node("old")
    Node.objects.filter(pk=current.pk).update(agent_version=runtime_version())
    Node.objects.filter(pk=old.pk).update(agent_version="0.0.1")
    client = Client()
    client.force_login(make_user("alice"))
    flag = f"outdated: server runs {runtime_version()}"
    listing = client.get("/nodes/").content.decode()
    rows = {
        pk: listing.split(f'<tr data-node-id="{pk}"')[1].split("</tr>")[0]
        for pk in (current.pk, old.pk)
    }
    assert 'class="badge-outdated"' in rows[old.pk] and flag in rows[old.pk]
    assert "0.0.1" in rows[old.pk]
    assert "outdated" not in rows[current.pk] and runtime_version() in rows[current.pk]
    page = client.get(f"/nodes/{old.pk}/").content.decode()
    assert flag in page and "re-run the install command" in page
    assert "outdated" not in client.get(f"/nodes/{current.pk}/").content.decode()
