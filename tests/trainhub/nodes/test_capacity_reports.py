"""The GPUs a node offers the scheduler are those it declared that its heartbeats report
(issue 26, item 2): a declared GPU its heartbeats do not list is taken out, recorded on
the node, audited and logged; listed again, it is offered again; an empty list changes
nothing."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.utils import timezone
from trainhub.agents.services import apply_heartbeats, handle_message
from trainhub.api.serializers.nodes import NodeSerializer
from trainhub.audit.models import AuditEntry
from trainhub.nodes.capacity import GPUS_CAPPED
from trainhub.nodes.models import Node
from trainhub.scheduling.snapshot import read_cluster

from ps_runtime.agent.protocol import Heartbeat, parse_from_agent

from ..factories import make_node

pytestmark = pytest.mark.django_db


def _heartbeat(*indices: int) -> dict[str, Any]:
    gpus = [{"index": i, "utilization_percent": 0.0, "memory_used_mb": 0} for i in indices]
    return {"type": "heartbeat", "usage": {"cpu_percent": 1.0}, "tasks": [], "gpus": gpus}


def _parsed(message: dict[str, Any]) -> Heartbeat:
    parsed = parse_from_agent(message)
    assert isinstance(parsed, Heartbeat)
    return parsed


def _scheduled_gpus(node: Node) -> float:
    (seen,) = [n for n in read_cluster(timezone.now()).snapshot.nodes if n.id == node.pk]
    return seen.capacity.gpu


def test_gpus_the_heartbeats_do_not_report_are_not_offered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node, _ = make_node(gpus=8)
    assert _scheduled_gpus(node) == 8
    with caplog.at_level(logging.WARNING, logger="trainhub.nodes.capacity"):
        handle_message(node_id=node.pk, message=_heartbeat(0, 1), now=timezone.now())
    node.refresh_from_db()
    assert [g["index"] for g in node.gpus] == [0, 1]
    assert _scheduled_gpus(node) == 2
    capped = node.capacity_capped["gpus"]
    assert len(capped["declared"]) == 8 and capped["reported"] == [0, 1]
    assert NodeSerializer(node).data["capacity_capped"]["gpus"]["reported"] == [0, 1]
    after = AuditEntry.objects.get(action=GPUS_CAPPED).after
    assert after is not None
    assert after["gpus"] == [0, 1] and after["declared"] == list(range(8))
    assert "declared 8 GPU(s)" in caplog.text and "offering 2" in caplog.text

    # The same report again changes nothing; the GPUs listed again are offered again.
    handle_message(node_id=node.pk, message=_heartbeat(0, 1), now=timezone.now())
    assert AuditEntry.objects.filter(action=GPUS_CAPPED).count() == 1
    handle_message(node_id=node.pk, message=_heartbeat(*range(8), 9), now=timezone.now())
    node.refresh_from_db()
    assert node.gpu_count == 8 and node.capacity_capped == {}
    assert _scheduled_gpus(node) == 8  # never more than declared, though 9 GPUs reported


def test_the_batched_heartbeat_path_caps_too_and_an_empty_list_says_nothing() -> None:
    node, _ = make_node(gpus=4)
    cpu_only, _ = make_node("cpu-1")
    now = timezone.now()
    apply_heartbeats(
        {
            node.pk: (_parsed(_heartbeat(2)), now),
            cpu_only.pk: (_parsed(_heartbeat(0)), now),
        }
    )
    node.refresh_from_db()
    cpu_only.refresh_from_db()
    assert [g["index"] for g in node.gpus] == [2]
    assert cpu_only.gpus == [] and cpu_only.capacity_capped == {}
    # No GPU query works on the node (or an older agent): nothing is known, nothing changes.
    apply_heartbeats({node.pk: (_parsed(_heartbeat()), timezone.now())})
    node.refresh_from_db()
    assert [g["index"] for g in node.gpus] == [2]
    assert AuditEntry.objects.filter(action=GPUS_CAPPED).count() == 1
