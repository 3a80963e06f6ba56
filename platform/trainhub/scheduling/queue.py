"""Where pending jobs stand in the queue, as the scheduler orders them (read side).

The order is the policy's own within a team (`policy.order.team_queue_key`: priority
level with aging, then virtual runtime, then submission time, then id); across teams this
ranks every pending job by that same key, so position 1 is the job the scheduler tries
first.

The database sorts: the aged level (`policy.order.level`) is written as date comparisons
("waited at least k aging periods" is "pending since before now - k periods"), which every
backend runs, so a page asking for the positions of its rows reads one column of ids
rather than thousands of rows (tests/trainhub/scheduling/test_queue.py checks that the
order is the policy's).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Case, F, IntegerField, Q, QuerySet, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from trainhub.jobs.choices import PRIORITY_WEIGHTS, JobState
from trainhub.jobs.models import Job

from .policy import order
from .policy.model import Job as PolicyJob
from .policy.model import Resources
from .vruntime import seen_vruntime


def _base_level(priority: str) -> int:
    """The policy's level of a job of `priority` that has not waited."""
    job = PolicyJob(
        id=0,
        team="",
        priority=priority,
        state="pending",
        submit_time=0.0,
        worker=Resources(),
        pending_since=0.0,
    )
    return order.level(job, 0.0, 0.0)


def _level(now: datetime) -> Case:
    """`policy.order.level` as an SQL expression over `since` (the start of the wait)."""
    aging = settings.SCHEDULER_AGING_SECONDS_PER_LEVEL
    whens = []
    for priority in PRIORITY_WEIGHTS:
        base = _base_level(priority)
        if aging > 0:
            for level in range(order.TOP_LEVEL, base, -1):
                waited = timedelta(seconds=(level - base) * aging)
                whens.append(When(Q(priority=priority, since__lte=now - waited), then=Value(level)))
        whens.append(When(priority=priority, then=Value(base)))
    return Case(*whens, default=Value(0), output_field=IntegerField())


def _pending(now: datetime) -> QuerySet[Job]:
    return (
        Job.objects.filter(state=JobState.PENDING, held=False)
        .annotate(since=Coalesce("pending_since", "created_at"))
        .annotate(level=_level(now), seen=seen_vruntime())
    )


def queue_positions(
    job_ids: Collection[int] | None = None, *, now: datetime | None = None
) -> dict[int, int]:
    """1-based queue position of each pending job (of `job_ids`, or of every one)."""
    ranked = (
        _pending(now or timezone.now())
        .order_by(F("level").desc(), "seen", "created_at", "id")
        .values_list("id", flat=True)
    )
    positions = {job_id: i + 1 for i, job_id in enumerate(ranked)}
    if job_ids is None:
        return positions
    return {j: positions[j] for j in job_ids if j in positions}


def position_if_submitted(priority: str, *, now: datetime) -> int:
    """Where a job of `priority` submitted at `now` would stand among the pending jobs
    (1 = first); on a tie it goes after the jobs already waiting, as it would."""
    mine = _base_level(priority)  # it has not waited; its virtual runtime is 0
    ahead = _pending(now).filter(
        Q(level__gt=mine) | Q(level=mine, seen__lt=0) | Q(level=mine, seen=0, created_at__lte=now)
    )
    return 1 + ahead.count()
