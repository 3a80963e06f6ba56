"""Carrying out the scheduler's decisions on a job: where its tasks run, how many workers,
and why a job still waits."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q, QuerySet

from trainhub.events import JobPendingReasonChanged, publish
from trainhub.nodes.models import Node

from ..choices import TASK_ACTIVE, DesiredState, JobState, TaskRole, TaskState
from ..models import Job, Task
from .tls import issue_job_ca
from .transitions import notify_nodes, record_event, transition_job


@dataclass(frozen=True)
class Placement:
    """Where one task of a job goes."""

    role: TaskRole
    index: int
    node_id: int
    port: int | None
    cpu: float
    memory_mb: int
    gpu_indices: list[int] = field(default_factory=list)
    borrowed: bool = False  # on idle quota lent by other teams


@transaction.atomic
def place_job(
    *,
    job: Job,
    placements: list[Placement],
    now: datetime,
    actor: str = "scheduler",
    hosts: list[str] | None = None,
) -> bool:
    """Create the job's tasks on their nodes and move it to starting (gang: all or nothing).

    A job requeued after a preemption gets new attempts of its earlier task slots. False
    (and nothing changed) if the job is not pending. `hosts`: the addresses of the
    placements' nodes, when the caller has them (read here otherwise).
    """
    never_placed = job.started_at is None  # then it has no task slots to reuse
    if not transition_job(
        job,
        JobState.STARTING,
        reason=placement_reason(placements),
        actor=actor,
        now=now,
        only_if=Q(held=False),  # held since the cycle read it (`holds.hold_job`)
        pending_reason="",
        started_at=now,
        last_rescale_at=now,
        pending_since=None,
    ):
        return False
    slots = {} if never_placed else {(t.role, t.index): t.pk for t in Task.objects.filter(job=job)}
    new = []
    for p in placements:
        slot = slots.get((p.role, p.index))
        if slot is None:
            new.append(new_task(job, p, p.index))
        else:
            new_attempt(Task.objects.filter(pk=slot), **_placed_fields(p))
    Task.objects.bulk_create(new)
    # Every task (re)starts now: the job's TLS is decided for all of them at once.
    if hosts is None:
        hosts = list(
            Node.objects.filter(pk__in={p.node_id for p in placements}).values_list(
                "address", flat=True
            )
        )
    issue_job_ca(job, hosts, now)
    notify_nodes(p.node_id for p in placements)
    return True


def placement_reason(placements: list[Placement]) -> str:
    """The starting event's reason: where the job was placed, and whether it borrows."""
    borrowed = any(p.borrowed for p in placements)
    return (
        "placed on "
        + ", ".join(sorted({f"node {p.node_id}" for p in placements}))
        + (" (on quota borrowed from other teams)" if borrowed else "")
    )


def set_pending_reasons(reasons: dict[int, str]) -> None:
    """Store why each pending job is still waiting (only rows whose reason changed, one
    UPDATE per distinct reason)."""
    # Every pending job's reason, rather than those of `reasons` by id: the same rows
    # (the cycle words a reason for each pending job), without an IN list of thousands.
    current = dict(Job.objects.filter(state=JobState.PENDING).values_list("pk", "pending_reason"))
    changed: dict[str, list[int]] = {}
    for job_id, reason in reasons.items():
        if job_id in current and current[job_id] != reason:
            changed.setdefault(reason, []).append(job_id)
    for reason, job_ids in changed.items():
        Job.objects.filter(pk__in=job_ids, state=JobState.PENDING).update(pending_reason=reason)
        for job_id in job_ids:
            publish(JobPendingReasonChanged(job_id=job_id, pending_reason=reason))


@transaction.atomic
def rescale_workers(
    *,
    job: Job,
    add: list[Placement],
    stop: list[Task],
    now: datetime,
    actor: str = "scheduler",
    why: str = "",
) -> None:
    """Start the workers in `add` and stop those in `stop` on a running job.

    A new worker reuses the slot of a worker stopped earlier (next attempt) when there is
    one. Every task of the job is told, since the cluster its tasks see changed. `why`
    (e.g. the job the scheduler made room for) goes into the event.
    """
    workers = Task.objects.filter(job=job, role=TaskRole.WORKER)
    before = workers.filter(desired=DesiredState.RUN).count()
    Task.objects.filter(pk__in=[t.pk for t in stop]).update(desired=DesiredState.STOP)
    free_slots = list(
        workers.filter(desired=DesiredState.STOP).exclude(state__in=TASK_ACTIVE).order_by("index")
    )
    next_index = (workers.order_by("-index").values_list("index", flat=True).first() or 0) + 1
    for p in add:
        if free_slots:
            slot = free_slots.pop(0)
            new_attempt(Task.objects.filter(pk=slot.pk), **_placed_fields(p))
        else:
            new_task(job, p, next_index).save()
            next_index += 1
    after = before + len(add) - len(stop)
    Job.objects.filter(pk=job.pk).update(last_rescale_at=now)
    reason = f"workers {before} -> {after}" + (f" ({why})" if why else "")
    record_event(job, kind="rescale", reason=reason, actor=actor, now=now)
    notify_nodes(Task.objects.filter(job=job).values_list("node_id", flat=True))


def _placed_fields(p: Placement) -> dict[str, Any]:
    return {
        "node_id": p.node_id,
        "port": p.port,
        "cpu": p.cpu,
        "memory_mb": p.memory_mb,
        "gpu_indices": p.gpu_indices,
        "borrowed": p.borrowed,
    }


def new_task(job: Job, p: Placement, index: int) -> Task:
    """A new task of `job` where `p` places it."""
    return Task(job=job, role=p.role, index=index, **_placed_fields(p))


def new_attempt(tasks: QuerySet[Task], *, rejoin: bool = False, **placement: Any) -> None:
    """Start the next attempt of these tasks (on the same node and port unless `placement`
    moves them); `rejoin`: PS that copy their shards from a live replica. `not_before`
    holds the attempt back until then (a restart's backoff, `restarts`)."""
    placement.setdefault("not_before", None)
    tasks.update(
        **placement,
        rejoin=rejoin,
        attempt=F("attempt") + 1,
        state=TaskState.ASSIGNED,
        desired=DesiredState.RUN,
        exit_code=None,
        message="",
        started_at=None,
        finished_at=None,
    )


@transaction.atomic
def move_server(*, job: Job, index: int, node_id: int, port: int, why: str, now: datetime) -> bool:
    """Place PS `index` of a running job with replicated shards on node `node_id`: the
    new attempt there copies its shards from a live replica and joins them (the job's
    other tasks read its address from their cluster file) while its node's agent stops
    the old one. False, changing nothing, when a server of the job is not running (one
    still copying would leave a shard without a live replica to copy from)."""
    servers = list(Task.objects.select_for_update().filter(job=job, role=TaskRole.PS))
    server = next((t for t in servers if t.index == index), None)
    if (
        job.state != JobState.RUNNING
        or job.job_spec.parameter_servers.replication <= 0
        or server is None
        or any(t.state != TaskState.RUNNING or t.desired != DesiredState.RUN for t in servers)
    ):
        return False
    old_node = server.node_id
    new_attempt(Task.objects.filter(pk=server.pk), rejoin=True, node_id=node_id, port=port)
    names = dict(Node.objects.filter(pk__in=[old_node, node_id]).values_list("pk", "hostname"))
    record_event(
        job,
        kind="move",
        reason=f"ps {index} moved from {names.get(old_node or 0)} to {names.get(node_id)} "
        f"({why}); "
        "it copies its shards from a live replica while the job runs on",
        actor="scheduler",
        now=now,
    )
    notify_nodes([old_node, *Task.objects.filter(job=job).values_list("node_id", flat=True)])
    return True
