"""Where pending jobs stand in the queue, as the scheduler orders them (read side).

The order is the policy's own within a team (`policy.order.team_queue_key`: priority
level with aging, then virtual runtime, then submission time); across teams this ranks
every pending job by that same key, so position 1 is the job the scheduler tries first.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job

from .policy import order
from .policy.model import Job as PolicyJob
from .policy.model import Resources


def queue_positions(
    job_ids: Collection[int] | None = None, *, now: datetime | None = None
) -> dict[int, int]:
    """1-based queue position of each pending job (of `job_ids`, or of every one)."""
    moment = (now or timezone.now()).timestamp()
    rows = Job.objects.filter(state=JobState.PENDING).values_list(
        "id", "priority", "vruntime", "created_at", "pending_since"
    )
    keys = []
    for job_id, priority, vruntime, created_at, pending_since in rows:
        job = PolicyJob(
            id=job_id,
            team="",
            priority=priority,
            state="pending",
            submit_time=created_at.timestamp(),
            worker=Resources(),
            workers_min=1,
            workers_max=1,
            ps_count=0,
            ps=Resources(),
            coordinator=Resources(),
            vruntime=vruntime,
            pending_since=None if pending_since is None else pending_since.timestamp(),
        )
        keys.append(
            (order.team_queue_key(job, moment, settings.SCHEDULER_AGING_SECONDS_PER_LEVEL), job_id)
        )
    ranked = {job_id: i + 1 for i, (_, job_id) in enumerate(sorted(keys))}
    if job_ids is None:
        return ranked
    return {j: ranked[j] for j in job_ids if j in ranked}
