"""What owners do to their jobs: submit, clone, scale and cancel.

Submissions and scalings of one team run one at a time (a lock on the team's quota row),
so two of them can never both fit under a priority cap that has room for one.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from trainhub.events import JobScaled, JobSubmitted, publish
from trainhub.tenancy.models import PriorityCap, Quota, Team
from trainhub.tenancy.resources import Resources, describe

from ..choices import JOB_TERMINAL, JobState
from ..jobspec import JobSpec
from ..models import Job
from ..usage import job_request, requested_at
from .transitions import (
    JobStateError,
    PriorityCapExceeded,
    ScaleError,
    record_event,
    transition_job,
)


def _lock_quota(team: Team) -> Quota:
    """Lock the team's quota row for the rest of the transaction."""
    quota, _ = Quota.objects.select_for_update().get_or_create(team=team)
    return quota


def _check_priority_cap(
    team: Team, priority: str, request: Resources, *, exclude_job: int | None = None
) -> None:
    """Raise PriorityCapExceeded if `request` does not fit the team's cap at `priority`
    beside its other active jobs at that priority (`exclude_job`: the job being scaled)."""
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


def check_submission(*, spec: JobSpec) -> None:
    """Refuse as `submit_job` would, creating nothing (a dry run: `POST jobs/?dry_run=true`).

    Raises:
        PriorityCapExceeded: the team's cap for the job's priority has no room for it.
    """
    team = Team.objects.get(slug=spec.team)
    _check_priority_cap(team, spec.priority, job_request(spec))


@transaction.atomic
def submit_job(
    *,
    user: User,
    spec: JobSpec,
    now: datetime,
    reason: str = "submitted",
    checkpoints_of: Job | None = None,
    reclaim_first: bool = False,
) -> Job:
    """Create a pending job from a validated spec (see `parse_job_spec`). `checkpoints_of`:
    the job whose checkpoints it continues; `reclaim_first`: borrowed capacity is taken
    back from it before other jobs (an experiment's trials).

    Raises:
        PriorityCapExceeded: the team's cap for the job's priority has no room for it.
    """
    team = Team.objects.get(slug=spec.team)
    _lock_quota(team)
    _check_priority_cap(team, spec.priority, job_request(spec))
    job = Job.objects.create(
        team=team,
        name=spec.name,
        submitted_by=user,
        priority=spec.priority,
        spec=spec.to_dict(),
        runtime_token=secrets.token_urlsafe(32),
        pending_reason="waiting for the scheduler",
        checkpoints_of=checkpoints_of,
        reclaim_first=reclaim_first,
    )
    record_event(
        job, kind="submitted", to_state=JobState.PENDING, reason=reason, actor=str(user), now=now
    )
    publish(JobSubmitted(job_id=job.pk, team_id=team.pk))
    return job


def clone_job(*, job: Job, user: User, spec: JobSpec, now: datetime) -> Job:
    """Submit a new job from `job`'s spec (`spec`: that spec, validated again with any
    changes, e.g. a new name)."""
    return submit_job(user=user, spec=spec, now=now, reason=f"cloned from job {job.pk}")


@transaction.atomic
def scale_job(*, job: Job, workers: int, actor: str, now: datetime) -> Job:
    """Set how many workers the job should run, within its spec's min and max.

    The scheduler grows or shrinks the job towards the target at its next cycle: the
    freeze window spaces only its own resizes, not an owner's target.

    Raises:
        ScaleError: `workers` is outside min..max.
        JobStateError: the job is over.
        PriorityCapExceeded: growing would exceed the team's cap for the job's priority.
    """
    bounds = job.job_spec.workers
    if not bounds.min <= workers <= bounds.max:
        raise ScaleError(
            f"Job {job.pk} runs between {bounds.min} and {bounds.max} workers "
            f"(its spec's workers.min and workers.max); {workers} is outside that."
        )
    _lock_quota(job.team)
    locked = Job.objects.select_for_update().get(pk=job.pk)
    if locked.state in JOB_TERMINAL:
        raise JobStateError(f"Job {job.pk} already {locked.state}; it cannot be scaled.")
    current = locked.target_workers or bounds.min
    if workers > current:
        _check_priority_cap(
            locked.team,
            locked.priority,
            job_request(locked.job_spec, workers),
            exclude_job=locked.pk,
        )
    if workers != current:
        Job.objects.filter(pk=locked.pk).update(target_workers=workers)
        record_event(
            locked, kind="scale", reason=f"workers {current} -> {workers}", actor=actor, now=now
        )
        publish(JobScaled(job_id=locked.pk, workers=workers))
    locked.refresh_from_db()
    return locked


@transaction.atomic
def cancel_job(*, job: Job, actor: str, now: datetime) -> Job:
    """Ask for the job to stop; its processes are stopped by their agents.

    Raises:
        JobStateError: the job is over already.
    """
    if job.state in JOB_TERMINAL:
        raise JobStateError(f"Job {job.pk} already {job.state}; there is nothing to cancel.")
    Job.objects.filter(pk=job.pk, cancel_requested_at__isnull=True).update(cancel_requested_at=now)
    transition_job(job, JobState.CANCELLED, reason="cancelled", actor=actor, now=now)
    job.refresh_from_db()
    return job
