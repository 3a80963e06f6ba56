"""A node's GPUs checked against what its heartbeats report.

The scheduler counts the GPUs in `Node.gpus`, the list the agent declared at enrollment.
Every heartbeat lists the GPUs the agent's NVML or `nvidia-smi` query sees (their usage,
by index). A declared GPU that the heartbeats do not list is not offered: it is taken out
of `Node.gpus`, the declared list is kept in `Node.capacity_capped`, the change is audited
(`node.cap_gpus`) and logged, and the scheduler re-plans. When the heartbeats list it
again it is offered again; a node never offers more than it declared.

A heartbeat listing no GPU says nothing (no GPU query works on the node, or an agent
older than the field); it changes nothing. CPUs and memory are not checked here: the
heartbeats carry no count of either, only usage. All of it is what the node's own agent
says, so this catches a node whose GPUs fail or that declared what it does not see, not
an agent that lies consistently; the enrollment token's limits bound that one.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from django.db import transaction

from trainhub.audit.services import record_change
from trainhub.events import NodeChanged, publish

from .models import Node

logger = logging.getLogger(__name__)

GPUS_CAPPED = "node.cap_gpus"


def declared_gpus(node_gpus: list[dict[str, Any]], capped: Mapping[str, Any]) -> list[Any]:
    """The GPUs the node declared at enrollment (its `gpus` unless they are capped now)."""
    found = (capped or {}).get("gpus", {}).get("declared")
    return list(found) if isinstance(found, list) else list(node_gpus)


def _offered(declared: list[dict[str, Any]], reported: Collection[int]) -> list[dict[str, Any]]:
    return [g for g in declared if int(g["index"]) in reported]


def cap_gpus_to_reports(reports: Mapping[int, Collection[int]], *, now: datetime) -> list[int]:
    """Offer each node the GPUs it declared that its latest heartbeat reports.

    Args:
        reports: node id -> the GPU indices its heartbeat listed; only nodes whose
            heartbeat listed at least one (an empty list says nothing).
        now: when the heartbeats arrived (recorded with a cap).

    Returns:
        The ids of the nodes whose offered GPUs changed; usually none, for one query.
    """
    if not reports:
        return []
    rows = Node.objects.filter(pk__in=list(reports)).values_list("pk", "gpus", "capacity_capped")
    changed = []
    for pk, gpus, capped in rows:
        if _offered(declared_gpus(gpus, capped), reports[pk]) != gpus and _cap_gpus(
            pk, set(reports[pk]), now
        ):
            changed.append(pk)
    return changed


@transaction.atomic
def _cap_gpus(node_id: int, reported: set[int], now: datetime) -> bool:
    """Set one node's offered GPUs under its row lock; False when they were right."""
    locked = Node.objects.select_for_update().filter(pk=node_id).first()
    if locked is None:
        return False
    declared = declared_gpus(locked.gpus, locked.capacity_capped)
    offered = _offered(declared, reported)
    if offered == locked.gpus:
        return False
    capped = (
        {}
        if len(offered) == len(declared)
        else {
            "gpus": {
                "declared": declared,
                "reported": sorted(reported),
                "since": now.isoformat(timespec="seconds"),
            }
        }
    )
    Node.objects.filter(pk=node_id).update(gpus=offered, capacity_capped=capped)
    record_change(
        actor=None,
        action=GPUS_CAPPED,
        target=locked,
        before={"gpus": [g["index"] for g in locked.gpus]},
        after={"gpus": [g["index"] for g in offered], "declared": [g["index"] for g in declared]},
    )
    publish(NodeChanged(node_id=node_id, reason=GPUS_CAPPED))
    logger.warning(
        "node %s declared %d GPU(s) at enrollment; its heartbeat reports indices %s: "
        "offering %d to the scheduler",
        node_id,
        len(declared),
        sorted(reported),
        len(offered),
    )
    return True
