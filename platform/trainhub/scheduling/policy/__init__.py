"""The scheduling policy (DESIGN.md §3): pure Python over a snapshot, no Django.

`schedule(snapshot, policy="cfs") -> Decisions` is the one entry point; the platform's
cycle (`scheduling.services.run_cycle`) and the simulator both call it. Modules: `model`
(snapshot and decisions), `order` (CFS-like order and aging), `quota` (nominal,
borrowing, lending), `placement` (gang, best fit, node rules), `reclaim` (evict, shrink,
preempt), `elastic` (growth), `baselines` (fifo and priority, for comparison).
"""

from __future__ import annotations

from collections.abc import Callable

from .baselines import schedule_fifo, schedule_priority
from .cfs import schedule_cfs
from .model import (
    COORDINATOR,
    CORDONED,
    LOST,
    PENDING,
    PRIORITY_WEIGHTS,
    PS,
    READY,
    RUNNING,
    STOPPING,
    UNLIMITED,
    WORKER,
    ZERO,
    AddWorker,
    Decisions,
    Job,
    ModelResources,
    MoveServer,
    Node,
    PolicyConfig,
    PreemptJob,
    RemoveWorker,
    Reservation,
    Resources,
    Snapshot,
    StartJob,
    Task,
    TaskPlacement,
    Team,
    gpu_model_of,
)

POLICIES: dict[str, Callable[[Snapshot], Decisions]] = {
    "cfs": schedule_cfs,
    "fifo": schedule_fifo,
    "priority": schedule_priority,
}


def schedule(snapshot: Snapshot, policy: str = "cfs", *, until: int | None = None) -> Decisions:
    """Decide one cycle. The same snapshot always gives the same decisions.

    `until`: only job `until`'s decision is wanted (a preview): the fair-share policy may
    stop as soon as it is final, leaving the other jobs' decisions incomplete."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {sorted(POLICIES)}")
    if policy == "cfs":
        return schedule_cfs(snapshot, until=until)
    return POLICIES[policy](snapshot)


__all__ = [
    "COORDINATOR",
    "CORDONED",
    "LOST",
    "PENDING",
    "POLICIES",
    "PRIORITY_WEIGHTS",
    "PS",
    "READY",
    "RUNNING",
    "STOPPING",
    "UNLIMITED",
    "WORKER",
    "ZERO",
    "AddWorker",
    "Decisions",
    "Job",
    "ModelResources",
    "MoveServer",
    "Node",
    "PolicyConfig",
    "PreemptJob",
    "RemoveWorker",
    "Reservation",
    "Resources",
    "Snapshot",
    "StartJob",
    "Task",
    "TaskPlacement",
    "Team",
    "gpu_model_of",
    "schedule",
]
