"""One scheduling cycle: snapshot the cluster, run the policy, apply its decisions."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction

from trainhub.jobs.choices import TASK_ACTIVE, DesiredState, JobState, TaskRole
from trainhub.jobs.models import Job
from trainhub.jobs.services import (
    advance_preemption,
    release_due_restarts,
    release_lost_nodes,
    rescale_workers,
)
from trainhub.nodes.models import Node
from trainhub.opmetrics import CYCLE_SECONDS

from . import policy
from .apply import apply_decisions, describe_decisions, summary
from .cache import cluster_view
from .locks import try_advisory_xact_lock
from .models import CycleRecord
from .never_fits import reword_never_fitting
from .policy.order import vruntime_increment
from .snapshot import ClusterView
from .vruntime import add_vruntime

logger = logging.getLogger(__name__)

# Virtual runtime accrues for at most this long between two cycles (after an outage the
# gap says nothing about who held what).
MAX_ACCRUAL_SECONDS = 60.0
# A preempted job's coordinator that outlives its grace period by this much is presumed
# gone with its node; the rest of the job is stopped regardless.
PREEMPTION_OVERDUE_SLACK_SECONDS = 15.0


@dataclass(frozen=True)
class CycleResult:
    ran: bool
    started: int = 0
    pending: int = 0
    observe_only: bool = False
    decisions: policy.Decisions = field(default_factory=policy.Decisions)
    lines: tuple[str, ...] = ()


def _advance_preemptions(now: datetime) -> None:
    grace = settings.PREEMPTION_GRACE_SECONDS + PREEMPTION_OVERDUE_SLACK_SECONDS
    for job in Job.objects.filter(state=JobState.PREEMPTED):
        advance_preemption(job, now=now, grace_seconds=grace)


def _shrink_to_targets(now: datetime) -> None:
    """Stop the workers above the count their owners scaled running jobs down to."""
    for job in Job.objects.filter(state=JobState.RUNNING, target_workers__isnull=False):
        workers = list(
            job.tasks.filter(
                role=TaskRole.WORKER, desired=DesiredState.RUN, state__in=TASK_ACTIVE
            ).order_by("index")
        )
        target = job.target_workers or 0
        if target < len(workers):
            rescale_workers(job=job, add=[], stop=workers[target:], now=now)


def _accrue_vruntime(view: ClusterView, now: datetime, last: CycleRecord | None) -> None:
    if last is None:
        return
    seconds = min(MAX_ACCRUAL_SECONDS, max(0.0, (now - last.ran_at).total_seconds()))
    if seconds <= 0:
        return
    capacity = policy.Resources()
    for n in view.snapshot.nodes:
        if n.state != policy.LOST:
            capacity = capacity + n.capacity
    increments = []
    for j in view.snapshot.jobs:
        if j.state != policy.RUNNING:
            continue
        held = policy.Resources()
        for t in j.tasks:
            if not t.stopping:
                held = held + t.resources
        increments.append((vruntime_increment(held, capacity, seconds, j.priority), j.id))
    add_vruntime(increments)


def run_cycle(
    *, now: datetime, policy_name: str | None = None, observe_only: bool | None = None
) -> CycleResult:
    """Run one cycle unless another is running (single-flight across the cluster).

    Everything it changes commits in one transaction, so a cycle retried after a crash
    starts from a consistent state. With `observe_only` (default: the
    TRAINHUB_SCHEDULER_OBSERVE_ONLY setting) it logs what it would do and does none of it.
    """
    name = policy_name or settings.SCHEDULER_POLICY
    observe = settings.SCHEDULER_OBSERVE_ONLY if observe_only is None else observe_only
    began = time.perf_counter()
    with transaction.atomic():
        if not try_advisory_xact_lock("scheduling_cycle"):
            return CycleResult(ran=False)
        lost = list(Node.objects.lost(now).values_list("pk", flat=True))
        if lost:
            release_lost_nodes(
                lost_node_ids=lost, now=now, lost_after_s=settings.NODE_LOST_AFTER_SECONDS
            )
        _advance_preemptions(now)
        release_due_restarts(now)  # in case the release queued for them was lost
        if not observe:
            _shrink_to_targets(now)
        # The cache's version check runs inside this transaction: the view is what the
        # database holds, this cycle's own changes above included.
        view = cluster_view(now)
        started = time.perf_counter()
        decisions = policy.schedule(view.snapshot, name)
        seconds = time.perf_counter() - started
        reword_never_fitting(view.snapshot, decisions)
        lines = tuple(describe_decisions(decisions))
        last = CycleRecord.objects.select_for_update().first()
        if observe:
            for line in lines:
                logger.info("observe-only (%s): would %s", name, line)
        else:
            apply_decisions(view, decisions, now)
            _accrue_vruntime(view, now, last)
            if decisions.starts or decisions.preemptions or decisions.add_workers:
                logger.info(
                    "scheduling cycle (%s): %s",
                    name,
                    "; ".join(lines[: len(lines) - len(decisions.pending_reasons)]),
                )
        record = last or CycleRecord()
        record.ran_at = now
        record.policy = name
        record.observe_only = observe
        record.summary = {**summary(decisions), "policy_seconds": round(seconds, 6)}
        record.save()
    CYCLE_SECONDS.observe(time.perf_counter() - began)
    return CycleResult(
        ran=True,
        started=0 if observe else len(decisions.starts),
        pending=len(decisions.pending_reasons),
        observe_only=observe,
        decisions=decisions,
        lines=lines,
    )


__all__ = ["CycleResult", "run_cycle"]
