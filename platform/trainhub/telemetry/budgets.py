"""Per-job budgets of stored telemetry: metric points and log bytes.

What lies beyond a budget is not stored; it is counted on the job's `JobTelemetry` row,
which the job page and the metrics and logs answers show. The row is locked for the
ingest's transaction, so concurrent batches of one job are charged one after another
and the counts are exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.conf import settings

from .models import JobTelemetry


def locked_usage(job_id: int) -> JobTelemetry:
    """The job's row, created if missing and locked until the transaction ends
    (call inside `transaction.atomic()`)."""
    usage = JobTelemetry.objects.select_for_update().filter(pk=job_id).first()
    if usage is None:
        JobTelemetry.objects.bulk_create([JobTelemetry(job_id=job_id)], ignore_conflicts=True)
        usage = JobTelemetry.objects.select_for_update().get(pk=job_id)
    return usage


def charge_points(usage: JobTelemetry, count: int, also: Sequence[str] = ()) -> int:
    """How many of `count` new points fit the budget (the first ones are kept); counts
    them as stored and the rest as dropped, and saves the row (and the fields named in
    `also`, changed by the caller: one UPDATE)."""
    room = max(settings.TELEMETRY_METRIC_POINTS_PER_JOB - usage.points, 0)
    kept = min(count, room)
    usage.points += kept
    usage.points_dropped += count - kept
    usage.save(update_fields=["points", "points_dropped", *also])
    return kept


def charge_log(usage: JobTelemetry, sizes: Sequence[int]) -> int:
    """How many of the lines of `sizes` bytes fit the budget: the longest prefix that
    does, and none once a line was dropped, so a log over its budget is cut at one place
    rather than full of holes. Counts
    them as stored and the rest as dropped, and saves the row."""
    budget = settings.TELEMETRY_LOG_BYTES_PER_JOB
    used = usage.log_bytes
    kept = 0
    for size in sizes:
        # After the first line dropped, every later one is too: one cut, no holes.
        if usage.log_lines_dropped or used + size > budget:
            break
        used += size
        kept += 1
    usage.log_bytes = used
    usage.log_lines_dropped += len(sizes) - kept
    usage.log_bytes_dropped += sum(sizes[kept:])
    usage.save(update_fields=["log_bytes", "log_lines_dropped", "log_bytes_dropped"])
    return kept


def lock_usages(job_ids: Iterable[int]) -> None:
    """Lock the rows of several jobs (created if missing) in job id order, until the
    transaction ends: how a transaction that stores batches of several jobs takes their
    locks (each `locked_usage` after it finds its row held already)."""
    ids = sorted(set(job_ids))
    JobTelemetry.objects.bulk_create(
        [JobTelemetry(job_id=job_id) for job_id in ids], ignore_conflicts=True
    )
    list(JobTelemetry.objects.select_for_update().filter(pk__in=ids).order_by("pk").values("pk"))
