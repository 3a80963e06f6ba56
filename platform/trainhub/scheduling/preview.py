"""Would a job start now if it were submitted? (`POST jobs/?dry_run=true`, the submit page's
preview).

The answer comes from the live policy itself: the cluster as the next cycle would read it
(`snapshot.read_cluster`), plus the job as a hypothetical pending one, through
`policy.schedule` — in memory. Nothing is written, no event is published and no cycle is
requested, so a preview changes nothing, however often it is asked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from trainhub.jobs.jobspec import JobSpec, ResourceSpec
from trainhub.jobs.services import check_submission

from . import policy
from .queue import position_if_submitted
from .snapshot import read_cluster

# The hypothetical job's id in the snapshot: real ids are positive, so it never clashes.
PREVIEW_JOB_ID = -1


@dataclass(frozen=True)
class Preview:
    """What a submission would meet now.

    `reason` is empty when the job fits now, else the pending reason the scheduler would
    give it. `estimated_start` is `now` when it fits; when the policy would free capacity
    for it (preempting or shrinking borrowers), now plus the preemption grace period; in
    every other case unknown (None): it depends on when other jobs finish.
    """

    fits_now: bool
    position: int
    reason: str
    estimated_start: datetime | None


def _resources(asked: ResourceSpec) -> policy.Resources:
    return policy.Resources(float(asked.cpu), float(asked.memory_mb), float(asked.gpu))


def hypothetical_job(spec: JobSpec, *, now: datetime) -> policy.Job:
    """`spec` as the policy sees a job that was just submitted."""
    return policy.Job(
        id=PREVIEW_JOB_ID,
        team=spec.team,
        priority=spec.priority,
        state=policy.PENDING,
        submit_time=now.timestamp(),
        worker=_resources(spec.workers.resources),
        workers_min=spec.workers.min,
        workers_max=spec.workers.max,
        ps_count=spec.parameter_servers.replicas,
        ps=_resources(spec.parameter_servers.resources),
        coordinator=_resources(spec.coordinator.resources),
        freeze_seconds=float(spec.freeze_seconds),
        pending_since=now.timestamp(),
    )


def preview_submission(spec: JobSpec, *, now: datetime) -> Preview:
    """Run the scheduling policy on the cluster as it is, with `spec` added as pending.

    `spec` is a validated spec (`parse_job_spec`): a preview refuses what a submission
    refuses, with the same errors.

    Raises:
        PriorityCapExceeded: the team's cap for the job's priority has no room for it.
    """
    check_submission(spec=spec)
    view = read_cluster(now)
    snapshot = dataclasses.replace(
        view.snapshot, jobs=(*view.snapshot.jobs, hypothetical_job(spec, now=now))
    )
    decisions = policy.schedule(snapshot, settings.SCHEDULER_POLICY)
    position = position_if_submitted(spec.priority, now=now)
    if any(start.job_id == PREVIEW_JOB_ID for start in decisions.starts):
        return Preview(fits_now=True, position=position, reason="", estimated_start=now)
    reserved = any(r.job_id == PREVIEW_JOB_ID for r in decisions.reservations)
    estimate = (
        now + timedelta(seconds=snapshot.config.preemption_grace_seconds) if reserved else None
    )
    reason = decisions.pending_reasons.get(PREVIEW_JOB_ID, "waiting for the next scheduling cycle")
    return Preview(fits_now=False, position=position, reason=reason, estimated_start=estimate)
