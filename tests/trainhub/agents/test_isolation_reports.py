"""The agent's `isolation` reaches the node, the API and the scheduler's snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from trainhub.agents.services import ProtocolError, handle_message
from trainhub.api.serializers.nodes import NodeSerializer
from trainhub.nodes.choices import NodeIsolation
from trainhub.scheduling.snapshot import read_cluster

from ..factories import make_node

pytestmark = pytest.mark.django_db


def _heartbeat(**extra: Any) -> dict[str, Any]:
    return {"type": "heartbeat", "usage": {"cpu_percent": 1.0}, "tasks": [], **extra}


def test_a_new_node_counts_as_unisolated_until_its_agent_says_otherwise() -> None:
    node, _ = make_node()
    assert node.isolation == NodeIsolation.NONE
    handle_message(node_id=node.pk, message=_heartbeat(isolation="uid+cgroup"), now=timezone.now())
    node.refresh_from_db()
    assert node.isolation == NodeIsolation.UID_CGROUP
    assert NodeSerializer(node).data["isolation"] == "uid+cgroup"
    # An agent that leaves the field out (older than it) changes nothing.
    handle_message(node_id=node.pk, message=_heartbeat(), now=timezone.now())
    node.refresh_from_db()
    assert node.isolation == NodeIsolation.UID_CGROUP
    handle_message(node_id=node.pk, message=_heartbeat(isolation="none"), now=timezone.now())
    node.refresh_from_db()
    assert node.isolation == NodeIsolation.NONE


def test_an_unknown_isolation_is_refused_naming_the_field() -> None:
    node, _ = make_node()
    with pytest.raises(ProtocolError) as info:
        handle_message(node_id=node.pk, message=_heartbeat(isolation="root"), now=timezone.now())
    assert str(info.value).startswith("isolation ")


def test_the_scheduler_sees_which_nodes_isolate() -> None:
    plain, _ = make_node("plain")
    isolated, _ = make_node("isolated")
    now = timezone.now()
    handle_message(node_id=isolated.pk, message=_heartbeat(isolation="uid"), now=now)
    handle_message(node_id=plain.pk, message=_heartbeat(), now=now)
    nodes = {n.id: n for n in read_cluster(now).snapshot.nodes}
    assert nodes[plain.pk].isolated is False
    assert nodes[isolated.pk].isolated is True


def test_a_sandboxing_agent_keeps_teams_apart_only_as_root() -> None:
    root, _ = make_node("root-agent")
    user, _ = make_node("user-agent")
    broken, _ = make_node("no-bwrap")
    now = timezone.now()
    handle_message(node_id=root.pk, message=_heartbeat(isolation="sandbox"), now=now)
    handle_message(node_id=user.pk, message=_heartbeat(isolation="sandbox-user"), now=now)
    handle_message(node_id=broken.pk, message=_heartbeat(isolation="unavailable"), now=now)
    nodes = {n.id: n for n in read_cluster(now).snapshot.nodes}
    assert nodes[root.pk].isolated is True
    assert nodes[user.pk].isolated is False  # every job as the agent's uid
    # A node whose agent cannot sandbox starts no task: nothing is placed there.
    assert nodes[root.pk].state == "ready" and nodes[user.pk].state == "ready"
    assert nodes[broken.pk].state == "cordoned"
