"""The capacity a node offers the scheduler is what it declared within what its heartbeats
report (issue 26, item 2): a declared GPU its heartbeats do not list is taken out, CPUs
or memory above the totals they report are lowered to them; recorded on the node,
audited and logged; reported again, it is offered again; a heartbeat that says nothing
of a resource changes nothing."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from trainhub.agents.services import ProtocolError, apply_heartbeats, handle_message
from trainhub.api.serializers.nodes import NodeSerializer
from trainhub.audit.models import AuditEntry
from trainhub.nodes.capacity import CPUS_CAPPED, GPUS_CAPPED, MEMORY_CAPPED
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


# CPUs and memory (issue 26, "declared capacity checked against reported facts"): the
# heartbeats carry the totals the agent measures, as at enrollment.


def _totals(**usage: float) -> dict[str, Any]:
    return {"type": "heartbeat", "usage": {"cpu_percent": 1.0, **usage}, "tasks": []}


def _scheduled(node: Node) -> tuple[float, float, float]:
    (seen,) = [n for n in read_cluster(timezone.now()).snapshot.nodes if n.id == node.pk]
    return seen.capacity.cpu, seen.capacity.memory_mb, seen.capacity.gpu


def test_cpus_the_heartbeats_do_not_report_are_not_offered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node, _ = make_node(cpus=64, memory_mb=65536)
    with caplog.at_level(logging.WARNING, logger="trainhub.nodes.capacity"):
        handle_message(
            node_id=node.pk, message=_totals(cpus=2, memory_total_mb=65536), now=timezone.now()
        )
    node.refresh_from_db()
    assert node.cpus == 2 and node.memory_mb == 65536
    assert _scheduled(node) == (2, 65536, 0)
    capped = node.capacity_capped
    assert set(capped) == {"cpus"}
    assert capped["cpus"]["declared"] == 64 and capped["cpus"]["reported"] == 2
    assert NodeSerializer(node).data["capacity_capped"]["cpus"]["declared"] == 64
    entry = AuditEntry.objects.get(action=CPUS_CAPPED)
    assert entry.before == {"cpus": 64} and entry.after == {"cpus": 2, "declared": 64}
    assert "declared cpus 64" in caplog.text and "offering 2" in caplog.text

    # The same report changes nothing; the declared CPUs reported again are offered
    # again, and never more than declared.
    handle_message(node_id=node.pk, message=_totals(cpus=2), now=timezone.now())
    assert AuditEntry.objects.filter(action=CPUS_CAPPED).count() == 1
    handle_message(node_id=node.pk, message=_totals(cpus=128), now=timezone.now())
    node.refresh_from_db()
    assert node.cpus == 64 and node.capacity_capped == {}
    assert _scheduled(node) == (64, 65536, 0)
    assert AuditEntry.objects.filter(action=CPUS_CAPPED).count() == 2


def test_memory_is_capped_on_the_batched_path_and_restored() -> None:
    node, _ = make_node(cpus=8, memory_mb=262144)
    other, _ = make_node("node-2", cpus=8, memory_mb=32768)
    now = timezone.now()
    apply_heartbeats(
        {
            node.pk: (_parsed(_totals(cpus=8, memory_total_mb=16000)), now),
            other.pk: (_parsed(_totals(cpus=8, memory_total_mb=32768)), now),
        }
    )
    node.refresh_from_db()
    other.refresh_from_db()
    assert node.memory_mb == 16000 and _scheduled(node) == (8, 16000, 0)
    assert node.capacity_capped["memory_mb"]["declared"] == 262144
    assert other.memory_mb == 32768 and other.capacity_capped == {}
    (entry,) = AuditEntry.objects.filter(action=MEMORY_CAPPED)
    assert entry.after == {"memory_mb": 16000, "declared": 262144}
    apply_heartbeats({node.pk: (_parsed(_totals(memory_total_mb=262144)), timezone.now())})
    node.refresh_from_db()
    assert node.memory_mb == 262144 and node.capacity_capped == {}
    assert _scheduled(node) == (8, 262144, 0)


def test_each_resource_keeps_its_own_cap() -> None:
    node, _ = make_node(cpus=64, memory_mb=65536, gpus=4)
    handle_message(node_id=node.pk, message=_heartbeat(0, 1), now=timezone.now())
    handle_message(
        node_id=node.pk, message=_totals(cpus=4, memory_total_mb=1024), now=timezone.now()
    )
    node.refresh_from_db()
    assert set(node.capacity_capped) == {"gpus", "cpus", "memory_mb"}
    assert _scheduled(node) == (4, 1024, 2)
    handle_message(node_id=node.pk, message=_totals(cpus=64), now=timezone.now())
    node.refresh_from_db()
    assert set(node.capacity_capped) == {"gpus", "memory_mb"}
    assert _scheduled(node) == (64, 1024, 2)


def test_a_heartbeat_without_totals_changes_nothing() -> None:
    node, _ = make_node(cpus=64, memory_mb=65536)
    handle_message(node_id=node.pk, message=_totals(), now=timezone.now())
    apply_heartbeats({node.pk: (_parsed(_totals()), timezone.now())})
    node.refresh_from_db()
    assert (node.cpus, node.memory_mb, node.capacity_capped) == (64, 65536, {})
    assert not AuditEntry.objects.filter(action__in=[CPUS_CAPPED, MEMORY_CAPPED]).exists()


def test_totals_that_match_cost_one_query_for_all_nodes() -> None:
    nodes = [make_node(f"node-{i}", cpus=8, memory_mb=32768)[0] for i in range(3)]
    now = timezone.now()

    def queries(message: dict[str, Any], count: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            apply_heartbeats({n.pk: (_parsed(message), now) for n in nodes[:count]})
        return len(captured)

    plain = queries(_totals(), 3)
    assert queries(_totals(cpus=8, memory_total_mb=32768), 1) == plain + 1
    assert queries(_totals(cpus=8, memory_total_mb=32768), 3) == plain + 1
    assert not AuditEntry.objects.filter(action__in=[CPUS_CAPPED, MEMORY_CAPPED]).exists()


def test_a_bad_total_is_refused_naming_the_field() -> None:
    node, _ = make_node(cpus=64)
    for usage, field in (
        ({"cpus": 0}, "usage.cpus"),
        ({"cpus": float("nan")}, "usage.cpus"),
        ({"memory_total_mb": -5}, "usage.memory_total_mb"),
        ({"memory_total_mb": 1.5}, "usage.memory_total_mb"),
    ):
        with pytest.raises(ProtocolError) as refused:
            handle_message(node_id=node.pk, message=_totals(**usage), now=timezone.now())
        assert refused.value.path == field
    node.refresh_from_db()
    assert node.cpus == 64 and node.capacity_capped == {}
