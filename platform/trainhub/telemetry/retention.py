"""Retention: deleting the raw telemetry of jobs that finished long ago.

With `TELEMETRY_RETENTION_DAYS` set (0, the default, keeps everything), the raw metric
points and log lines (their chunks) of jobs that finished longer ago than that are
deleted, a job at a time. Each metric's series summary and rollups are kept: its chart
still draws, from blocks of 16 steps or more (`selectors.metric_buckets`), and its final
values (`finals.py`) stay. The job's `JobTelemetry` row records when (`purged_at`), so
the API and the job page can say why the lines are gone. Celery beat runs
`tasks.purge_expired_telemetry` every `TELEMETRY_RETENTION_INTERVAL_SECONDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from trainhub.jobs.choices import JOB_TERMINAL

from .models import JobTelemetry, LogChunk, MetricChunk


@dataclass(frozen=True, slots=True)
class Purged:
    jobs: int = 0
    points: int = 0
    lines: int = 0


def purge_expired(*, now: datetime, days: float | None = None) -> Purged:
    """Delete the raw points and log lines of the jobs finished more than `days`
    (default: the setting) before `now`; nothing when retention is off."""
    days = settings.TELEMETRY_RETENTION_DAYS if days is None else days
    if days <= 0:
        return Purged()
    due = JobTelemetry.objects.filter(
        purged_at=None,
        job__state__in=JOB_TERMINAL,
        job__finished_at__lt=now - timedelta(days=days),
    ).values_list("job_id", flat=True)
    jobs = points = lines = 0
    for job_id in list(due.order_by("job_id")):
        with transaction.atomic():
            JobTelemetry.objects.filter(pk=job_id).update(purged_at=now)
            chunks = MetricChunk.objects.filter(job_id=job_id)
            points += chunks.aggregate(n=Sum("count"))["n"] or 0
            chunks.delete()
            logs = LogChunk.objects.filter(job_id=job_id)
            lines += logs.aggregate(n=Sum("count"))["n"] or 0
            logs.delete()
        jobs += 1
    return Purged(jobs=jobs, points=points, lines=lines)
