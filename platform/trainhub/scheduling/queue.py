"""Where pending jobs stand in the queue, as the scheduler orders them (read side).

The order is the policy's own within a team (`policy.order.team_queue_key`: priority
level with aging, then virtual runtime, then submission time); across teams this ranks
every pending job by that same key, so position 1 is the job the scheduler tries first.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job

from .policy import order
from .policy.model import Job as PolicyJob
from .policy.model import Resources

QueueKey = tuple[float, ...]


def _key(
    moment: float,
    job_id: int,
    priority: str,
    vruntime: float,
    submitted: float,
    pending_since: float | None,
) -> QueueKey:
    """The policy's within-team order key (only the fields it reads are filled in)."""
    job = PolicyJob(
        id=job_id,
        team="",
        priority=priority,
        state="pending",
        submit_time=submitted,
        worker=Resources(),
        vruntime=vruntime,
        pending_since=pending_since,
    )
    return order.team_queue_key(job, moment, settings.SCHEDULER_AGING_SECONDS_PER_LEVEL)


def _pending_keys(moment: float) -> list[tuple[QueueKey, int]]:
    """Every pending job's order key, in one query."""
    rows = Job.objects.filter(state=JobState.PENDING).values_list(
        "id", "priority", "vruntime", "created_at", "pending_since"
    )
    return [
        (
            _key(
                moment,
                job_id,
                priority,
                vruntime,
                created_at.timestamp(),
                None if pending_since is None else pending_since.timestamp(),
            ),
            job_id,
        )
        for job_id, priority, vruntime, created_at, pending_since in rows
    ]


def queue_positions(
    job_ids: Collection[int] | None = None, *, now: datetime | None = None
) -> dict[int, int]:
    """1-based queue position of each pending job (of `job_ids`, or of every one)."""
    keys = _pending_keys((now or timezone.now()).timestamp())
    ranked = {job_id: i + 1 for i, (_, job_id) in enumerate(sorted(keys))}
    if job_ids is None:
        return ranked
    return {j: ranked[j] for j in job_ids if j in ranked}


def position_if_submitted(priority: str, *, now: datetime) -> int:
    """Where a job of `priority` submitted at `now` would stand among the pending jobs
    (1 = first); on a tie it goes after the jobs already waiting, as it would."""
    moment = now.timestamp()
    keys = _pending_keys(moment)
    mine = _key(moment, sys.maxsize, priority, 0.0, moment, moment)
    return 1 + sum(1 for key, _ in keys if key < mine)
