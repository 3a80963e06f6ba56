"""The job state machine: guarded transitions, the event history, and what they publish.

The bottom of the services package: every other module moves jobs through
`transition_job` and writes history with `record_event`; this one imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import Q

from trainhub.events import (
    JobEventRecorded,
    JobStateChanged,
    NodeTasksChanged,
    TaskStateChanged,
    publish,
)

from ..choices import (
    JOB_TERMINAL,
    TASK_ACTIVE,
    TASK_TERMINAL,
    DesiredState,
    JobState,
    allowed_sources,
)
from ..models import Job, JobEvent, Task


class JobStateError(Exception):
    """The job is not in a state that allows this action."""


class PriorityCapExceeded(Exception):
    """The team's cap for the job's priority leaves no room for the request now."""

    def __init__(self, message: str, *, impossible: bool) -> None:
        super().__init__(message)
        self.impossible = impossible  # the request alone is above the cap


class ScaleError(Exception):
    """The requested worker count is outside the job's min/max."""


def record_event(
    job: Job,
    *,
    kind: str,
    reason: str,
    actor: str,
    now: datetime,
    from_state: str = "",
    to_state: str = "",
) -> None:
    """Add a line to the job's history (and tell whoever listens, after the commit)."""
    event = JobEvent.objects.create(
        job=job,
        time=now,
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        actor=actor,
    )
    publish(
        JobEventRecorded(
            job_id=job.pk,
            time=event.time.isoformat(),
            kind=kind,
            reason=reason,
            actor=actor,
            from_state=from_state,
            to_state=to_state,
        )
    )


def transition_job(
    job: Job,
    to: JobState,
    *,
    reason: str,
    actor: str,
    now: datetime,
    only_if: Q | None = None,
    **updates: Any,
) -> bool:
    """Move the job to `to` if its current state allows it; False (and no change) if not.

    The conditional UPDATE makes concurrent actors safe: exactly one of them wins;
    `only_if` adds to its condition (placement: the job is not held).
    `updates` are other fields of the job set in the same UPDATE. A job that ends has its
    tasks stopped.
    """
    if to in JOB_TERMINAL:
        updates.setdefault("finished_at", now)
    rows = Job.objects.filter(pk=job.pk, state__in=allowed_sources(to))
    if only_if is not None:  # a further condition of the same UPDATE
        rows = rows.filter(only_if)
    changed = rows.update(state=to, **updates)
    if not changed:
        return False
    from_state = job.state
    # What changed, and what the event and the message below read; not the spec (a large
    # JSON document that nothing here needs).
    job.refresh_from_db(fields=["state", "message", "pending_reason", *updates])
    record_event(
        job, kind="state", from_state=from_state, to_state=to, reason=reason, actor=actor, now=now
    )
    publish(
        JobStateChanged(
            job_id=job.pk,
            state=to,
            message=job.message,
            pending_reason=job.pending_reason if to == JobState.PENDING else "",
        )
    )
    if to in JOB_TERMINAL:
        stop_tasks(job)
    return True


def stop_tasks(job: Job) -> None:
    """Ask the agents to stop every task of the job that should still run."""
    active = Task.objects.filter(job=job, state__in=TASK_ACTIVE, desired=DesiredState.RUN)
    node_ids = list(active.values_list("node_id", flat=True))
    active.update(desired=DesiredState.STOP)
    notify_nodes(node_ids)


def notify_nodes(node_ids: Iterable[int | None]) -> None:
    """The desired tasks of these nodes changed: their agents should reconcile."""
    ids = tuple(sorted({n for n in node_ids if n is not None}))
    if ids:
        publish(NodeTasksChanged(node_ids=ids))


def publish_task_state(task: Task, state: str, message: str = "") -> None:
    """Tell listeners that a task of a job is now in `state` (ended: its node has room);
    `message`: a preparing task's progress."""
    publish(
        TaskStateChanged(
            job_id=task.job_id,
            task_id=task.pk,
            role=task.role,
            index=task.index,
            state=state,
            ended=state in TASK_TERMINAL,
            message=message,
        )
    )
