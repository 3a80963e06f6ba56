"""Reading metrics and logs back."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import Q

from trainhub.jobs.models import Job

from .models import LogLine, MetricPoint, MetricRollup, MetricSeries
from .rollups import Plan, Row, Span, Summary, buckets, plan


def metric_series(job: Job, names: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """All points of the job by metric name, ordered by step."""
    points = MetricPoint.objects.filter(job=job)
    if names:
        points = points.filter(name__in=names)
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for name, step, value, time in points.order_by("name", "step", "id").values_list(
        "name", "step", "value", "time"
    ):
        series[name].append({"step": step, "value": value, "time": time.isoformat()})
    return dict(series)


def metric_buckets(
    job: Job,
    *,
    max_points: int,
    names: list[str] | None = None,
    start: int | None = None,
    end: int | None = None,
) -> dict[str, Any]:
    """The job's metrics for a chart: at most `max_points` buckets per metric over steps
    `start..end` (default: all), each with its last point, min, max and point count.

    A range with at most `max_points` points comes back exact: one bucket per step.
    Reads the series summaries, then the rollup blocks and raw points the plans name
    (at most four queries, whatever the number of metrics).
    """
    found = MetricSeries.objects.filter(job=job)
    if names:
        found = found.filter(name__in=names)
    plans = []
    for name, first, last, total in found.order_by("name").values_list(
        "name", "first_step", "last_step", "count"
    ):
        p = plan(
            name,
            first=first,
            last=last,
            total=total,
            max_points=max_points,
            start=start,
            end=end,
        )
        if p is not None:
            plans.append(p)
    read = _read(job, plans)
    # A range cut out of a longer series may turn out to hold few points: read them raw.
    sparse = [
        Plan(p.name, p.lo, p.hi, p.lo, 1, (Span(0, p.lo, p.hi),))
        for p in plans
        if p.width > 1 and sum(s.count for s in read[p.name]) <= max_points
    ]
    read.update(_read(job, sparse))
    return {
        "downsampled": any(s.count > 1 for series in read.values() for s in series),
        "series": {p.name: [s.as_bucket() for s in read[p.name]] for p in plans},
    }


def _read(job: Job, plans: list[Plan]) -> dict[str, list[Summary]]:
    blocks, raw = Q(), Q()
    for p in plans:
        for s in p.spans:
            if s.level:
                blocks |= Q(name=p.name, level=s.level, block__range=(s.first, s.last))
            else:
                raw |= Q(name=p.name, step__range=(s.first, s.last))
    rows: dict[str, list[Row]] = defaultdict(list)
    if blocks:
        for name, level, block, low, high, count, last_step, last_value in (
            MetricRollup.objects.filter(job=job)
            .filter(blocks)
            .values_list(
                "name",
                "level",
                "block",
                "min_value",
                "max_value",
                "count",
                "last_step",
                "last_value",
            )
        ):
            rows[name].append((level, block, Summary(low, high, count, last_step, last_value)))
    if raw:
        for name, step, value in (
            MetricPoint.objects.filter(job=job)
            .filter(raw)
            .order_by("step", "id")
            .values_list("name", "step", "value")
        ):
            rows[name].append((0, step, Summary.of_point(step, value)))
    return {p.name: buckets(p, rows[p.name]) for p in plans}


def log_lines(
    job: Job,
    *,
    after_id: int = 0,
    limit: int = 1000,
    tail: int | None = None,
    search: str = "",
    source: str = "",
) -> list[dict[str, Any]]:
    """Lines of the job after line `after_id`, in id order: the first `limit`, or with
    `tail` the last `tail`; only those of `source` (e.g. "worker-0") and containing
    `search` (any case) when given."""
    rows = LogLine.objects.filter(job=job, id__gt=after_id)
    if source:
        rows = rows.filter(source=source)
    if search:
        rows = rows.filter(line__icontains=search)
    if tail is not None:
        picked = list(rows.order_by("-id")[:tail])[::-1]
    else:
        picked = list(rows.order_by("id")[:limit])
    return [
        {
            "id": r.id,
            "source": r.source,
            "stream": r.stream,
            "line": r.line,
            "time": r.time.isoformat(),
        }
        for r in picked
    ]


LOG_CHUNK_LINES = 5000


def _log_chunk(job_id: int, after_id: int) -> tuple[bytes, int]:
    """Up to LOG_CHUNK_LINES lines after `after_id` as `[source] line` text, and the last
    id read (`after_id` when none)."""
    rows = list(
        LogLine.objects.filter(job_id=job_id, id__gt=after_id)
        .order_by("id")
        .values_list("id", "source", "line")[:LOG_CHUNK_LINES]
    )
    text = "".join(f"[{source}] {line}\n" for _, source, line in rows)
    return text.encode(), rows[-1][0] if rows else after_id


def log_text(job_id: int) -> Iterator[bytes]:
    """The job's whole log as `[source] line` text, read in id order a chunk at a time."""
    after = 0
    while True:
        chunk, last = _log_chunk(job_id, after)
        if last == after:
            return
        yield chunk
        after = last


async def alog_text(job_id: int) -> AsyncIterator[bytes]:
    """`log_text` for an ASGI server, which would otherwise read a sync iterator whole."""
    after = 0
    while True:
        chunk, last = await sync_to_async(_log_chunk)(job_id, after)
        if last == after:
            return
        yield chunk
        after = last
