"""Heartbeats of many nodes written in one statement: each node gets its own values, and a
field a heartbeat leaves out keeps what the node had."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from trainhub.nodes.heartbeats import HeartbeatRecord, record_heartbeats
from trainhub.nodes.models import Node

from ..factories import make_node

pytestmark = pytest.mark.django_db


def test_record_heartbeats_writes_each_node_its_own_values() -> None:
    first, _ = make_node("node-1")
    second, _ = make_node("node-2")
    third, _ = make_node("node-3")
    Node.objects.filter(pk=second.pk).update(isolation="user", agent_version="1.0.0")
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    record_heartbeats(
        [
            HeartbeatRecord(second.pk, {"cpu_percent": 2.5}, now + timedelta(seconds=1)),
            HeartbeatRecord(
                first.pk, {"cpu_percent": 9.0, "gpus": [{"index": 0}]}, now, "none", "1.2.0"
            ),
        ]
    )
    one, two, three = (Node.objects.get(pk=n.pk) for n in (first, second, third))
    assert (one.last_seen, one.usage, one.isolation, one.agent_version) == (
        now,
        {"cpu_percent": 9.0, "gpus": [{"index": 0}]},
        "none",
        "1.2.0",
    )
    assert (two.last_seen, two.usage) == (now + timedelta(seconds=1), {"cpu_percent": 2.5})
    assert (two.isolation, two.agent_version) == ("user", "1.0.0")  # not reported: kept
    assert three.last_seen == third.last_seen and three.usage == third.usage
    record_heartbeats([])  # nothing to write is no statement and no error
