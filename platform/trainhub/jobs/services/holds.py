"""Holding a job in the queue, and letting it go (a paused experiment's trials).

A held job keeps its place but the scheduler does not see it (`scheduling.snapshot`);
holding a job that holds tasks preempts it first: its coordinator saves a checkpoint,
and the requeued job waits, held, to resume from it once released.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction

from trainhub.events import JobStateChanged, publish

from ..choices import JOB_PLACED, JobState
from ..models import Job
from .preemption import preempt_job
from .transitions import record_event


@transaction.atomic
def hold_job(*, job: Job, reason: str, actor: str, now: datetime) -> bool:
    """Hold `job` (pending or placed) in the queue; False if it ended or is held already."""
    locked = Job.objects.select_for_update().get(pk=job.pk)
    if locked.held or locked.state not in (JobState.PENDING, JobState.PREEMPTED, *JOB_PLACED):
        return False
    Job.objects.filter(pk=locked.pk).update(held=True, pending_reason=f"held: {reason}")
    record_event(locked, kind="hold", reason=f"held: {reason}", actor=actor, now=now)
    if locked.state in JOB_PLACED:
        preempt_job(
            job=locked,
            grace_seconds=settings.PREEMPTION_GRACE_SECONDS,
            reason=f"held: {reason}",
            now=now,
            actor=actor,
        )
    job.refresh_from_db()
    return True


@transaction.atomic
def release_job(*, job: Job, actor: str, now: datetime) -> bool:
    """Let a held job be scheduled again; False if it was not held."""
    locked = Job.objects.select_for_update().get(pk=job.pk)
    if not locked.held:
        return False
    reason = "waiting for the scheduler"
    Job.objects.filter(pk=locked.pk).update(held=False, pending_reason=reason)
    record_event(locked, kind="release", reason="released from hold", actor=actor, now=now)
    if locked.state == JobState.PENDING:
        # The scheduler sees it again: a pending job calls for a cycle.
        publish(JobStateChanged(job_id=locked.pk, state=JobState.PENDING, pending_reason=reason))
    job.refresh_from_db()
    return True
