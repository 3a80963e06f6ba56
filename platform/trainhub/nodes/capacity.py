"""A node's capacity checked against what its heartbeats report.

The scheduler counts `Node.gpus`, `Node.cpus` and `Node.memory_mb`, what the agent
declared at enrollment. Every heartbeat lists the GPUs the agent's NVML or `nvidia-smi`
query sees (their usage, by index) and, from agents that send them, the CPUs the agent
may use and the node's memory (`usage.cpus`, `usage.memory_total_mb`), measured as at
enrollment. What the node declared but the heartbeats do not report is not offered: a
declared GPU they do not list is taken out of `Node.gpus`, and `Node.cpus`/`memory_mb`
are lowered to the reported totals; the declared values are kept in
`Node.capacity_capped`, the change is audited (`node.cap_gpus`, `node.cap_cpus`,
`node.cap_memory`) and logged, and the scheduler re-plans. When the reports rise again
the capacity is offered again; a node never offers more than it declared.

A heartbeat listing no GPU, or without the totals, says nothing of them (no GPU query
works on the node, or an agent older than the field); it changes nothing. All of it is
what the node's own agent says, so this catches a node whose GPUs fail or that declared
what it does not have, not an agent that lies consistently; the enrollment token's
limits bound that one.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from trainhub.audit.services import record_change
from trainhub.events import NodeChanged, publish

from .models import Node

logger = logging.getLogger(__name__)

GPUS_CAPPED = "node.cap_gpus"
CPUS_CAPPED = "node.cap_cpus"
MEMORY_CAPPED = "node.cap_memory"


@dataclass(frozen=True, slots=True)
class CapacityReport:
    """What one node's latest heartbeat says it has; empty or None says nothing."""

    gpus: Collection[int] = ()  # the GPU indices it listed
    cpus: float | None = None
    memory_mb: int | None = None

    def __bool__(self) -> bool:
        return bool(self.gpus) or self.cpus is not None or self.memory_mb is not None


@dataclass(frozen=True, slots=True)
class _Offer:
    gpus: list[dict[str, Any]]
    cpus: float
    memory_mb: int


def declared_gpus(node_gpus: list[dict[str, Any]], capped: Mapping[str, Any]) -> list[Any]:
    """The GPUs the node declared at enrollment (its `gpus` unless they are capped now)."""
    found = (capped or {}).get("gpus", {}).get("declared")
    return list(found) if isinstance(found, list) else list(node_gpus)


def _declared(name: str, current: Any, capped: Mapping[str, Any]) -> Any:
    """The `cpus` or `memory_mb` the node declared (its current one unless capped now)."""
    found = (capped or {}).get(name, {}).get("declared")
    return current if found is None else found


def _offered(declared: list[dict[str, Any]], reported: Collection[int]) -> list[dict[str, Any]]:
    return [g for g in declared if int(g["index"]) in reported]


def _offer(
    gpus: list[dict[str, Any]],
    cpus: float,
    memory_mb: int,
    capped: Mapping[str, Any],
    report: CapacityReport,
) -> _Offer:
    """What the node should offer given its declaration and the report; what the report
    says nothing of stays as it is."""
    return _Offer(
        gpus=_offered(declared_gpus(gpus, capped), report.gpus) if report.gpus else gpus,
        cpus=cpus if report.cpus is None else min(_declared("cpus", cpus, capped), report.cpus),
        memory_mb=memory_mb
        if report.memory_mb is None
        else min(_declared("memory_mb", memory_mb, capped), report.memory_mb),
    )


def cap_to_reports(reports: Mapping[int, CapacityReport], *, now: datetime) -> list[int]:
    """Offer each node what it declared within what its latest heartbeat reports.

    Args:
        reports: node id -> what its heartbeat reported; only nodes whose heartbeat said
            something (a GPU, or a total).
        now: when the heartbeats arrived (recorded with a cap).

    Returns:
        The ids of the nodes whose offered capacity changed; usually none, for one query.
    """
    reports = {pk: r for pk, r in reports.items() if r}
    if not reports:
        return []
    rows = Node.objects.filter(pk__in=list(reports)).values_list(
        "pk", "gpus", "cpus", "memory_mb", "capacity_capped"
    )
    changed = []
    for pk, gpus, cpus, memory_mb, capped in rows:
        offer = _offer(gpus, cpus, memory_mb, capped, reports[pk])
        if offer != _Offer(gpus, cpus, memory_mb) and _cap(pk, reports[pk], now):
            changed.append(pk)
    return changed


@transaction.atomic
def _cap(node_id: int, report: CapacityReport, now: datetime) -> bool:
    """Set one node's offered capacity under its row lock; False when it was right."""
    locked = Node.objects.select_for_update().filter(pk=node_id).first()
    if locked is None:
        return False
    capped = dict(locked.capacity_capped or {})
    offer = _offer(locked.gpus, locked.cpus, locked.memory_mb, capped, report)
    since = now.isoformat(timespec="seconds")
    actions = []
    if offer.gpus != locked.gpus:
        declared = declared_gpus(locked.gpus, capped)
        capped.pop("gpus", None)
        if len(offer.gpus) < len(declared):
            capped["gpus"] = {"declared": declared, "reported": sorted(report.gpus), "since": since}
        _record(
            locked,
            GPUS_CAPPED,
            "gpus",
            _indices(locked.gpus),
            _indices(offer.gpus),
            _indices(declared),
            sorted(report.gpus),
        )
        actions.append(GPUS_CAPPED)
    for name, action, value, reported in (
        ("cpus", CPUS_CAPPED, offer.cpus, report.cpus),
        ("memory_mb", MEMORY_CAPPED, offer.memory_mb, report.memory_mb),
    ):
        before = getattr(locked, name)
        if value == before:
            continue
        declared = _declared(name, before, capped)
        capped.pop(name, None)
        if value < declared:
            capped[name] = {"declared": declared, "reported": reported, "since": since}
        _record(locked, action, name, before, value, declared, reported)
        actions.append(action)
    if not actions:
        return False
    Node.objects.filter(pk=node_id).update(
        gpus=offer.gpus, cpus=offer.cpus, memory_mb=offer.memory_mb, capacity_capped=capped
    )
    for action in actions:
        publish(NodeChanged(node_id=node_id, reason=action))
    return True


def _indices(gpus: list[dict[str, Any]]) -> list[Any]:
    return [g["index"] for g in gpus]


def _record(
    node: Node, action: str, name: str, before: Any, after: Any, declared: Any, reported: Any
) -> None:
    """Audit and log one resource's new offer."""
    record_change(
        actor=None,
        action=action,
        target=node,
        before={name: before},
        after={name: after, "declared": declared},
    )
    if name == "gpus":
        logger.warning(
            "node %s declared %d GPU(s) at enrollment; its heartbeat reports indices %s: "
            "offering %d to the scheduler",
            node.pk,
            len(declared),
            reported,
            len(after),
        )
    else:
        logger.warning(
            "node %s declared %s %s at enrollment; its heartbeat reports %s: "
            "offering %s to the scheduler",
            node.pk,
            name,
            declared,
            reported,
            after,
        )
