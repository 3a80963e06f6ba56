"""Every change to jobs and tasks: submission, placement, task reports, cancellation."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F

from trainhub.events import scheduling_needed
from trainhub.nodes.channels import notify_tasks_changed
from trainhub.tenancy.models import PriorityCap, Quota, Team
from trainhub.tenancy.resources import Resources, describe

from .channels import broadcast_on_commit
from .choices import (
    JOB_PLACED,
    JOB_TERMINAL,
    TASK_ACTIVE,
    DesiredState,
    JobState,
    TaskRole,
    TaskState,
    allowed_sources,
)
from .models import Job, JobEvent, Task
from .usage import job_request, requested_at

# The coordinator's exit code for "a parameter server was lost" (docs/protocol.md §2).
EXIT_PS_LOST = 75


class JobStateError(Exception):
    """The job is not in a state that allows this action."""


class PriorityCapExceeded(Exception):
    """The team's cap for the job's priority leaves no room for the request now."""

    def __init__(self, message: str, *, impossible: bool) -> None:
        super().__init__(message)
        self.impossible = impossible  # the request alone is above the cap


class ScaleError(Exception):
    """The requested worker count is outside the job's min/max."""


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


def _request_scheduling() -> None:
    transaction.on_commit(lambda: scheduling_needed.send(sender=Job))


def _record(
    job: Job,
    *,
    kind: str,
    reason: str,
    actor: str,
    now: datetime,
    from_state: str = "",
    to_state: str = "",
) -> None:
    event = JobEvent.objects.create(
        job=job,
        time=now,
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        actor=actor,
    )
    broadcast_on_commit(
        job.pk,
        {
            "type": "job.event",
            "time": event.time.isoformat(),
            "kind": kind,
            "from_state": from_state,
            "to_state": to_state,
            "reason": reason,
            "actor": actor,
        },
    )


def transition_job(
    job: Job, to: JobState, *, reason: str, actor: str, now: datetime, **updates: Any
) -> bool:
    """Move the job to `to` if its current state allows it; False (and no change) if not.

    The conditional UPDATE makes concurrent actors safe: exactly one of them wins.
    """
    sources = allowed_sources(to)
    if to in JOB_TERMINAL:
        updates.setdefault("finished_at", now)
    changed = Job.objects.filter(pk=job.pk, state__in=sources).update(state=to, **updates)
    if not changed:
        return False
    from_state = job.state
    job.refresh_from_db()
    _record(
        job, kind="state", from_state=from_state, to_state=to, reason=reason, actor=actor, now=now
    )
    broadcast_on_commit(job.pk, {"type": "job.state", "state": to, "message": job.message})
    if to in JOB_TERMINAL:
        _stop_tasks(job)
        _request_scheduling()
    return True


def _stop_tasks(job: Job) -> None:
    active = Task.objects.filter(job=job, state__in=TASK_ACTIVE, desired=DesiredState.RUN)
    node_ids = [n for n in active.values_list("node_id", flat=True) if n is not None]
    active.update(desired=DesiredState.STOP)
    notify_tasks_changed(node_ids)


def _lock_quota(team: Team) -> Quota:
    """Lock the team's quota row: submissions and scalings of one team run one at a time,
    so two of them can never both fit under a cap that has room for one."""
    quota, _ = Quota.objects.select_for_update().get_or_create(team=team)
    return quota


def _check_priority_cap(
    team: Team, priority: str, request: Resources, *, exclude_job: int | None = None
) -> None:
    cap = PriorityCap.objects.filter(team=team, priority=priority).first()
    if cap is None:
        return
    over = request.exceeding(cap.limit)
    if over:
        raise PriorityCapExceeded(
            f"Team '{team.slug}' may run at most {describe(cap.limit, over)} at {priority} "
            f"priority; this job alone requests {describe(request, over)}.",
            impossible=True,
        )
    active = requested_at(team.pk, priority, exclude_job=exclude_job)
    over = (active + request).exceeding(cap.limit)
    if over:
        raise PriorityCapExceeded(
            f"Team '{team.slug}' may run at most {describe(cap.limit, over)} at {priority} "
            f"priority; its active {priority} jobs already request {describe(active, over)} "
            f"and this job {describe(request, over)}. Wait for some to finish, or cancel some.",
            impossible=False,
        )


@transaction.atomic
def submit_job(
    *, user: User, spec: dict[str, Any], now: datetime, reason: str = "submitted"
) -> Job:
    """Create a pending job from a validated spec (see `JobSpecSerializer`).

    Raises:
        PriorityCapExceeded: the team's cap for the job's priority has no room for it.
    """
    team = Team.objects.get(slug=spec["team"])
    _lock_quota(team)
    _check_priority_cap(team, spec["priority"], job_request(spec))
    job = Job.objects.create(
        team=team,
        name=spec["name"],
        submitted_by=user,
        priority=spec["priority"],
        spec=spec,
        runtime_token=secrets.token_urlsafe(32),
        pending_reason="waiting for the scheduler",
    )
    _record(
        job,
        kind="submitted",
        to_state=JobState.PENDING,
        reason=reason,
        actor=str(user),
        now=now,
    )
    _request_scheduling()
    return job


def clone_job(*, job: Job, user: User, spec: dict[str, Any], now: datetime) -> Job:
    """Submit a new job from `job`'s spec (`spec`: that spec, validated again with any
    changes, e.g. a new name)."""
    return submit_job(user=user, spec=spec, now=now, reason=f"cloned from job {job.pk}")


@transaction.atomic
def scale_job(*, job: Job, workers: int, actor: str, now: datetime) -> Job:
    """Set how many workers the job should run, within its spec's min and max.

    The scheduler grows or shrinks the job towards the target (outside its freeze window).

    Raises:
        ScaleError: `workers` is outside min..max.
        JobStateError: the job is over.
        PriorityCapExceeded: growing would exceed the team's cap for the job's priority.
    """
    bounds = job.spec["workers"]
    if not bounds["min"] <= workers <= bounds["max"]:
        raise ScaleError(
            f"Job {job.pk} runs between {bounds['min']} and {bounds['max']} workers "
            f"(its spec's workers.min and workers.max); {workers} is outside that."
        )
    _lock_quota(job.team)
    locked = Job.objects.select_for_update().get(pk=job.pk)
    if locked.state in JOB_TERMINAL:
        raise JobStateError(f"Job {job.pk} already {locked.state}; it cannot be scaled.")
    current = locked.target_workers or bounds["min"]
    if workers > current:
        _check_priority_cap(
            locked.team,
            locked.priority,
            job_request(locked.spec, workers),
            exclude_job=locked.pk,
        )
    if workers != current:
        Job.objects.filter(pk=locked.pk).update(target_workers=workers)
        _record(
            locked,
            kind="scale",
            reason=f"workers {current} -> {workers}",
            actor=actor,
            now=now,
        )
        _request_scheduling()
    locked.refresh_from_db()
    return locked


@transaction.atomic
def cancel_job(*, job: Job, actor: str, now: datetime) -> Job:
    """Ask for the job to stop; its processes are stopped by their agents."""
    if job.state in JOB_TERMINAL:
        raise JobStateError(f"Job {job.pk} already {job.state}; there is nothing to cancel.")
    Job.objects.filter(pk=job.pk, cancel_requested_at__isnull=True).update(cancel_requested_at=now)
    transition_job(job, JobState.CANCELLED, reason="cancelled", actor=actor, now=now)
    job.refresh_from_db()
    return job


@transaction.atomic
def place_job(
    *, job: Job, placements: list[Placement], now: datetime, actor: str = "scheduler"
) -> bool:
    """Create the job's tasks on their nodes and move it to starting (gang: all or nothing).

    A job requeued after a preemption gets new attempts of its earlier task slots.
    """
    borrowed = any(p.borrowed for p in placements)
    if not transition_job(
        job,
        JobState.STARTING,
        reason="placed on "
        + ", ".join(sorted({f"node {p.node_id}" for p in placements}))
        + (" (on quota borrowed from other teams)" if borrowed else ""),
        actor=actor,
        now=now,
        pending_reason="",
        started_at=now,
        last_rescale_at=now,
        pending_since=None,
    ):
        return False
    slots = {(t.role, t.index): t.pk for t in Task.objects.filter(job=job)}
    new = []
    for p in placements:
        slot = slots.get((p.role, p.index))
        if slot is None:
            new.append(_task(job, p, p.index))
        else:
            _new_attempt(Task.objects.filter(pk=slot), **_placed_fields(p))
    Task.objects.bulk_create(new)
    notify_tasks_changed(p.node_id for p in placements)
    return True


def set_pending_reasons(reasons: dict[int, str]) -> None:
    """Store why each pending job is still waiting (only rows whose reason changed, one
    UPDATE per distinct reason)."""
    current = dict(
        Job.objects.filter(pk__in=reasons, state=JobState.PENDING).values_list(
            "pk", "pending_reason"
        )
    )
    changed: dict[str, list[int]] = {}
    for job_id, reason in reasons.items():
        if job_id in current and current[job_id] != reason:
            changed.setdefault(reason, []).append(job_id)
    for reason, job_ids in changed.items():
        Job.objects.filter(pk__in=job_ids, state=JobState.PENDING).update(pending_reason=reason)
        for job_id in job_ids:
            broadcast_on_commit(
                job_id, {"type": "job.state", "state": JobState.PENDING, "pending_reason": reason}
            )


@transaction.atomic
def record_task_status(
    *,
    node_id: int,
    task_id: int,
    attempt: int,
    state: TaskState,
    exit_code: int | None,
    message: str,
    now: datetime,
) -> None:
    """Apply what an agent reported about one of its task processes."""
    task = (
        Task.objects.select_for_update()
        .select_related("job")
        .filter(pk=task_id, node_id=node_id, attempt=attempt)
        .first()
    )
    if task is None or task.state not in TASK_ACTIVE:
        return  # stale report: an old attempt, or already final
    job = task.job
    actor = f"node {node_id}"
    updates: dict[str, Any] = {"state": state}
    if state == TaskState.RUNNING:
        updates["started_at"] = now
    else:
        updates.update(finished_at=now, exit_code=exit_code, message=message[:2000])
        _request_scheduling()  # its node has room again
    Task.objects.filter(pk=task.pk).update(**updates)
    broadcast_on_commit(
        job.pk,
        {
            "type": "task.state",
            "task": task.pk,
            "role": task.role,
            "index": task.index,
            "state": state,
        },
    )

    if state == TaskState.RUNNING:
        wanted = Task.objects.filter(job=job, desired=DesiredState.RUN)
        if not wanted.exclude(state=TaskState.RUNNING).exists():
            transition_job(job, JobState.RUNNING, reason="all tasks running", actor=actor, now=now)
        return
    if job.state == JobState.PREEMPTED:
        if task.role == TaskRole.COORDINATOR:
            _coordinator_stopped(job, exit_code, actor=actor, now=now)
        advance_preemption(job, now=now)
        return
    if state == TaskState.STOPPED or task.desired == DesiredState.STOP:
        return
    if job.state not in JOB_PLACED:
        return
    if task.role == TaskRole.COORDINATOR and state == TaskState.SUCCEEDED:
        transition_job(
            job, JobState.SUCCEEDED, reason="coordinator exited with code 0", actor=actor, now=now
        )
        return
    what = f"{task.role} {task.index} exited with code {exit_code}"
    detail = f"{what}: {message}" if message else what
    max_restarts = int(job.spec.get("max_restarts", 0))
    restartable = task.role != TaskRole.COORDINATOR or exit_code == EXIT_PS_LOST
    if restartable and job.restarts < max_restarts:
        _restart_after_failure(job, task, detail, actor=actor, now=now)
        return
    if restartable and max_restarts:
        detail = f"{detail} (after {job.restarts} restarts, the spec's max_restarts)"
    transition_job(job, JobState.FAILED, reason=detail, actor=actor, now=now, message=detail)


def _restart_after_failure(job: Job, task: Task, detail: str, *, actor: str, now: datetime) -> None:
    """A lost worker is relaunched alone (the coordinator re-runs its closures); a lost PS
    restarts every task, and the coordinator resumes from the job's last checkpoint."""
    Job.objects.filter(pk=job.pk).update(restarts=F("restarts") + 1)
    count = f"restart {job.restarts + 1} of {job.spec['max_restarts']}"
    if task.role == TaskRole.WORKER:
        _new_attempt(Task.objects.filter(pk=task.pk))
        _record(
            job, kind="restart", reason=f"{detail}; relaunching it ({count})", actor=actor, now=now
        )
        notify_tasks_changed([task.node_id] if task.node_id else [])
        return
    transition_job(
        job,
        JobState.RESTARTING,
        reason=f"{detail}; restarting the job from its last checkpoint ({count})",
        actor=actor,
        now=now,
    )
    tasks = Task.objects.filter(job=job, desired=DesiredState.RUN)  # not scaled-away workers
    _new_attempt(tasks)
    notify_tasks_changed(n for n in tasks.values_list("node_id", flat=True) if n is not None)


def _placed_fields(p: Placement) -> dict[str, Any]:
    return {
        "node_id": p.node_id,
        "port": p.port,
        "cpu": p.cpu,
        "memory_mb": p.memory_mb,
        "gpu_indices": p.gpu_indices,
        "borrowed": p.borrowed,
    }


def _task(job: Job, p: Placement, index: int) -> Task:
    """A new task of `job` where `p` places it."""
    return Task(job=job, role=p.role, index=index, **_placed_fields(p))


def _new_attempt(tasks: Any, **placement: Any) -> None:
    """Start the next attempt of these tasks (on the same node and port unless `placement`
    moves them)."""
    tasks.update(
        **placement,
        attempt=F("attempt") + 1,
        state=TaskState.ASSIGNED,
        desired=DesiredState.RUN,
        exit_code=None,
        message="",
        started_at=None,
        finished_at=None,
    )


@transaction.atomic
def release_lost_nodes(*, lost_node_ids: list[int], lost_after_s: float, now: datetime) -> int:
    """End the tasks of nodes not heard from in time; their running jobs fail with the reason.

    Returns how many tasks were ended.
    """
    tasks = list(
        Task.objects.select_for_update()
        .filter(node_id__in=lost_node_ids, state__in=TASK_ACTIVE)
        .select_related("job", "node")
    )
    for task in tasks:
        stopping = task.desired == DesiredState.STOP
        hostname = task.node.hostname if task.node else "?"
        reason = f"node {hostname} lost: no heartbeat for {lost_after_s:g} s"
        Task.objects.filter(pk=task.pk).update(
            state=TaskState.STOPPED if stopping else TaskState.FAILED,
            finished_at=now,
            message=reason,
        )
        if not stopping and task.job.state in JOB_PLACED:
            transition_job(
                task.job, JobState.FAILED, reason=reason, actor="scheduler", now=now, message=reason
            )
    return len(tasks)


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
    before = Task.objects.filter(job=job, role=TaskRole.WORKER, desired=DesiredState.RUN).count()
    Task.objects.filter(pk__in=[t.pk for t in stop]).update(desired=DesiredState.STOP)
    free_slots = list(
        Task.objects.filter(job=job, role=TaskRole.WORKER, desired=DesiredState.STOP)
        .exclude(state__in=TASK_ACTIVE)
        .order_by("index")
    )
    next_index = (
        Task.objects.filter(job=job, role=TaskRole.WORKER)
        .order_by("-index")
        .values_list("index", flat=True)
        .first()
        or 0
    ) + 1
    for p in add:
        if free_slots:
            slot = free_slots.pop(0)
            _new_attempt(Task.objects.filter(pk=slot.pk), **_placed_fields(p))
        else:
            _task(job, p, next_index).save()
            next_index += 1
    after = before + len(add) - len(stop)
    Job.objects.filter(pk=job.pk).update(last_rescale_at=now)
    reason = f"workers {before} -> {after}" + (f" ({why})" if why else "")
    _record(job, kind="rescale", reason=reason, actor=actor, now=now)
    nodes = Task.objects.filter(job=job).exclude(node=None).values_list("node_id", flat=True)
    notify_tasks_changed(nodes)


# A coordinator asked to stop (SIGTERM) exits 0 once it saved a checkpoint
# (docs/protocol.md §2); anything else means the job resumes from its last periodic one.
_STOPPED_AFTER_CHECKPOINT = 0


@transaction.atomic
def preempt_job(
    *, job: Job, grace_seconds: float, reason: str, now: datetime, actor: str = "scheduler"
) -> bool:
    """Preempt a running job: its coordinator is asked to save a checkpoint and stop within
    `grace_seconds` while the PS shards and workers keep serving; then they are stopped
    too and the job is requeued (`advance_preemption`). False if the job is not running.
    """
    if not transition_job(
        job,
        JobState.PREEMPTED,
        reason=f"{reason}; asking its coordinator to save a checkpoint and stop "
        f"(grace {grace_seconds:g} s)",
        actor=actor,
        now=now,
        preempted_at=now,
        preemptions=F("preemptions") + 1,
    ):
        return False
    coordinator = Task.objects.filter(
        job=job, role=TaskRole.COORDINATOR, state__in=TASK_ACTIVE, desired=DesiredState.RUN
    )
    if coordinator.exists():
        node_ids = list(coordinator.values_list("node_id", flat=True))
        coordinator.update(desired=DesiredState.STOP)
        notify_tasks_changed(n for n in node_ids if n is not None)
    else:
        advance_preemption(job, now=now)
    return True


def _coordinator_stopped(job: Job, exit_code: int | None, *, actor: str, now: datetime) -> None:
    if exit_code == _STOPPED_AFTER_CHECKPOINT:
        reason = "the coordinator saved a checkpoint and stopped"
    else:
        reason = (
            f"the coordinator stopped without a new checkpoint (exit code {exit_code}); "
            "the job will resume from its last periodic checkpoint"
        )
    _record(job, kind="checkpoint", reason=reason, actor=actor, now=now)


def advance_preemption(job: Job, *, now: datetime, grace_seconds: float | None = None) -> None:
    """Move a preempted job on: once its coordinator is gone (or overdue by the grace
    period), stop the PS shards and workers; once every task is gone, requeue the job."""
    job.refresh_from_db()
    if job.state != JobState.PREEMPTED:
        return
    active = Task.objects.filter(job=job, state__in=TASK_ACTIVE)
    coordinator_active = active.filter(role=TaskRole.COORDINATOR).exists()
    overdue = (
        grace_seconds is not None
        and job.preempted_at is not None
        and (now - job.preempted_at).total_seconds() > grace_seconds
    )
    if active.filter(desired=DesiredState.RUN).exists() and (not coordinator_active or overdue):
        _record(
            job,
            kind="stop",
            reason="stopping its parameter servers and workers",
            actor="scheduler",
            now=now,
        )
        _stop_tasks(job)
        return
    if active.exists():
        return
    transition_job(
        job,
        JobState.PENDING,
        reason="requeued; it resumes from its checkpoint when it starts again",
        actor="scheduler",
        now=now,
        pending_since=now,
        preempted_at=None,
        pending_reason="requeued after a preemption",
    )
    _request_scheduling()


@transaction.atomic
def settle_unstarted_tasks(*, node_id: int, live: set[tuple[Any, Any]], now: datetime) -> int:
    """Tasks stopped before their agent started them will never be reported on: once the
    node's heartbeat (its live task attempts) shows they are not running, they are
    stopped. Returns how many were."""
    settled = 0
    # Twice: stopping a preempted job's coordinator this way stops its PS and workers.
    for _ in range(2):
        unstarted = [
            t
            for t in Task.objects.select_for_update()
            .filter(node_id=node_id, state=TaskState.ASSIGNED, desired=DesiredState.STOP)
            .select_related("job")
            if (t.pk, t.attempt) not in live
        ]
        if not unstarted:
            break
        Task.objects.filter(pk__in=[t.pk for t in unstarted]).update(
            state=TaskState.STOPPED, finished_at=now, message="stopped before it started"
        )
        for job in {t.job_id: t.job for t in unstarted}.values():
            if job.state == JobState.PREEMPTED:
                advance_preemption(job, now=now)
        settled += len(unstarted)
    if settled:
        _request_scheduling()
    return settled
