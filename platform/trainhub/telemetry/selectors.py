"""Reading metrics and logs back."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from itertools import islice
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async
from django.db import connection
from django.db.models import Max, Min

from trainhub.jobs.models import Job

from .chunks import from_micros, read_ranges, read_series
from .codec import Columns
from .logchunks import READ_CHUNKS, iter_lines
from .models import JobTelemetry, LogChunk, MetricRollup, MetricSeries
from .rollups import BITS, Plan, Row, Summary, buckets, plan, raw_plan


def usage_of(job: Job) -> JobTelemetry | None:
    """The job's budget counts (see `budgets.py`); None if it never reported anything.
    No query when `job` was read with `select_related("telemetry")`."""
    try:
        return job.telemetry
    except JobTelemetry.DoesNotExist:
        return None


def budget_counts(job: Job) -> dict[str, Any]:
    """What the job's budgets dropped, and when retention deleted its raw telemetry."""
    usage = usage_of(job)
    return {
        "points_dropped": usage.points_dropped if usage else 0,
        "log_lines_dropped": usage.log_lines_dropped if usage else 0,
        "log_bytes_dropped": usage.log_bytes_dropped if usage else 0,
        "purged_at": usage.purged_at.isoformat() if usage and usage.purged_at else None,
    }


def metric_series(
    job: Job,
    names: list[str] | None = None,
    *,
    start: int | None = None,
    end: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """All points of the job by metric name over steps `start..end` (default: all), ordered
    by step; only the chunks that overlap the range are decoded."""
    series: dict[str, list[dict[str, Any]]] = {}
    for name, columns in sorted(read_series(job.pk, names or None, start=start, end=end).items()):
        times = columns.times.tolist()
        series[name] = [
            {"step": step, "value": value, "time": from_micros(times[i]).isoformat()}
            for i, (step, value) in enumerate(
                zip(columns.steps.tolist(), columns.values.tolist(), strict=True)
            )
        ]
    return series


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
    At most three queries whatever the number of metrics (five when a range turns out
    sparse): the series summaries, then the rollup blocks and the chunks of raw points
    the plans name (only the chunks over those steps are decoded). Once retention
    deleted the raw points, only rollups are read: blocks of 16 steps or more.
    """
    usage = usage_of(job)
    min_level = 1 if usage is not None and usage.purged_at is not None else 0
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
            min_level=min_level,
        )
        if p is not None:
            plans.append(p)
    read = _read(job, plans)
    # A range cut out of a longer series may turn out to hold few points: read them raw.
    sparse = [
        raw_plan(p.name, p.lo, p.hi)
        for p in plans
        if not min_level and p.width > 1 and sum(s.count for s in read[p.name]) <= max_points
    ]
    read.update(_read(job, sparse))
    return {
        "downsampled": any(s.count > 1 for series in read.values() for s in series),
        "series": {p.name: [s.as_bucket() for s in read[p.name]] for p in plans},
    }


def metric_clock(job: Job, *, max_points: int) -> list[dict[str, Any]]:
    """When the job reached its steps: `{step, time}` pairs ascending by step, at most
    `2 * max_points` of them, for charts drawn over time rather than steps.

    The steps of every metric are cut into at most `max_points` equal ranges; each range
    gives its first step with the earliest time reported in it and its last step with the
    latest. Two queries (every chunk of the job is decoded). Empty once retention deleted
    the raw points (rollups keep no time) or before the job reported anything.
    """
    span = MetricSeries.objects.filter(job=job).aggregate(
        first=Min("first_step"), last=Max("last_step")
    )
    first, last = span["first"], span["last"]
    if first is None or last is None:
        return []
    width = max(1, -(-(last - first + 1) // max_points))  # ceil
    found = list(read_series(job.pk).values())
    if not found:
        return []
    columns = Columns.concat(found)
    order = np.argsort((columns.steps - first) // width, kind="stable")
    steps, times = columns.steps[order], columns.times[order]
    bucket = (steps - first) // width
    starts = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
    clock: list[dict[str, Any]] = []
    for first_step, first_time, last_step, last_time in zip(
        np.minimum.reduceat(steps, starts).tolist(),
        np.minimum.reduceat(times, starts).tolist(),
        np.maximum.reduceat(steps, starts).tolist(),
        np.maximum.reduceat(times, starts).tolist(),
        strict=True,
    ):
        clock.append({"step": first_step, "time": from_micros(first_time).isoformat()})
        if last_step != first_step:
            clock.append({"step": last_step, "time": from_micros(last_time).isoformat()})
    return clock


def _read(job: Job, plans: list[Plan]) -> dict[str, list[Summary]]:
    """Read what `plans` name in one statement and fold it into buckets.

    The widest level's blocks are grouped into buckets by the database (at most
    `max_points` rows per metric come back); the finer blocks at cut ends and raw points
    come back as they are.
    """
    parts: list[str] = []
    params: list[Any] = []
    raw = [(p.name, s.first, s.last) for p in plans for s in p.spans if s.level == 0]
    rows: dict[str, list[Row]] = _raw_rows(job.pk, raw)
    for p in plans:
        for span in p.spans:
            if span.level == 0:
                continue
            if span.level == p.level:
                per_bucket = p.width >> (BITS * p.level)
                parts.append(
                    _GROUPED.format(
                        origin=int(p.origin),
                        width=int(p.width),
                        first=int(p.origin >> (BITS * p.level)),
                        per_bucket=int(per_bucket),
                        shift=BITS * int(p.level),
                    )
                )
                params += [job.pk, p.name, span.level, span.first, span.last, job.pk, p.level]
            else:
                parts.append(_BLOCKS)
                params += [job.pk, p.name, span.level, span.first, span.last]
    if parts:
        quote = connection.ops.quote_name
        sql = " UNION ALL ".join(parts).format(rollups=quote(MetricRollup._meta.db_table))
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            fetched = cursor.fetchall()
        for name, level, block, low, high, count, last_step, last_value in fetched:
            rows[name].append((level, block, Summary(low, high, count, last_step, last_value)))
    # Raw points of one step come in arrival order: `buckets` keeps that order.
    return {p.name: buckets(p, rows[p.name]) for p in plans}


def _raw_rows(job_id: int, spans: list[tuple[str, int, int]]) -> dict[str, list[Row]]:
    """The raw points of each `(name, first step, last step)` as rows, by name, decoded
    from the chunks over those ranges (one query)."""
    rows: dict[str, list[Row]] = defaultdict(list)
    if not spans:
        return rows
    found = read_ranges(job_id, spans)
    for (name, _, _), columns in zip(spans, found, strict=True):
        rows[name] += [
            (0, step, Summary(value, value, 1, step, value))
            for step, value in zip(columns.steps.tolist(), columns.values.tolist(), strict=True)
        ]
    return rows


# Columns of every part: name, level, block (or step), min, max, count, last step and
# value.
_BLOCKS = (
    'SELECT name, level, block, min_value, max_value, "count", last_step, last_value'
    " FROM {rollups} WHERE job_id = %s AND name = %s AND level = %s"
    " AND block BETWEEN %s AND %s"
)
# Bucket i holds blocks first + i * per_bucket onwards (`first`: the block at `origin`)
# and starts at step origin + i * width; its last value is that of the block holding its
# last step (the blocks of one level have distinct last steps).
_GROUPED = (
    "SELECT g.name, 0, {origin} + g.i * {width}, g.low, g.high, g.n, g.last_step,"
    " r.last_value"
    " FROM (SELECT name, (block - {first}) / {per_bucket} AS i, MIN(min_value) AS low,"
    ' MAX(max_value) AS high, SUM("count") AS n, MAX(last_step) AS last_step'
    " FROM {{rollups}} WHERE job_id = %s AND name = %s AND level = %s"
    " AND block BETWEEN %s AND %s GROUP BY name, i) AS g"
    " JOIN {{rollups}} AS r ON r.job_id = %s AND r.name = g.name AND r.level = %s"
    " AND r.block = (g.last_step >> {shift})"
)


def log_lines(
    job: Job,
    *,
    after_id: int = 0,
    limit: int = 1000,
    tail: int | None = None,
    search: str = "",
    source: str = "",
    task_id: int | None = None,
) -> list[dict[str, Any]]:
    """Lines of the job after line `after_id`, in id order: the first `limit`, or with
    `tail` the last `tail`; only those of `source` (e.g. "worker-0") or of task `task_id`
    and containing `search` (any case) when given. Reads the chunks a bounded number at
    a time (a search only those whose text contains it) until it has enough lines."""
    chunks = LogChunk.objects.filter(job=job)
    if source:
        chunks = chunks.filter(source=source)
    if task_id is not None:
        chunks = chunks.filter(task_id=task_id)
    if search:
        chunks = chunks.filter(lines__icontains=search)
    found = iter_lines(chunks, after_id=after_id, descending=tail is not None)
    if search:
        needle = search.lower()
        found = (line for line in found if needle in line.line.lower())
    picked = list(islice(found, limit if tail is None else tail))
    if tail is not None:
        picked.reverse()
    return [line.as_dict() for line in picked]


def _log_chunk(job_id: int, task_id: int | None, after: int) -> tuple[bytes, int]:
    """The text of up to READ_CHUNKS chunks after chunk `after`, and the last chunk id
    read (`after` when none): of the whole job as `[source] line`, of one task as stored."""
    chunks = LogChunk.objects.filter(job_id=job_id, id__gt=after)
    if task_id is not None:
        chunks = chunks.filter(task_id=task_id)
    picked = list(chunks.order_by("id").values_list("id", "source", "lines")[:READ_CHUNKS])
    if task_id is None:
        text = "".join(
            f"[{source}] {line}\n" for _, source, lines in picked for line in lines.split("\n")
        )
    else:
        text = "".join(f"{lines}\n" for _, _, lines in picked)
    return text.encode(), picked[-1][0] if picked else after


def log_text(job_id: int, task_id: int | None = None) -> Iterator[bytes]:
    """The job's whole log as `[source] line` text, or with `task_id` that task's stream
    byte for byte as stored (its line at `offset` starts at that byte), read in id order
    a few chunks at a time."""
    after = 0
    while True:
        text, last = _log_chunk(job_id, task_id, after)
        if last == after:
            return
        yield text
        after = last


async def alog_text(job_id: int, task_id: int | None = None) -> AsyncIterator[bytes]:
    """`log_text` for an ASGI server, which would otherwise read a sync iterator whole."""
    after = 0
    while True:
        text, last = await sync_to_async(_log_chunk)(job_id, task_id, after)
        if last == after:
            return
        yield text
        after = last


def stderr_tail(task_id: int, *, since: datetime | None, limit: int) -> list[str]:
    """The last `limit` stderr lines of a task stored since `since` (its attempt's start),
    oldest first: what the failure causes (`jobs.causes`) read a traceback from. Uses
    the (task, id) index; an earlier attempt's traceback is not read back."""
    chunks = LogChunk.objects.filter(task_id=task_id, stream="stderr")
    if since is not None:
        chunks = chunks.filter(time__gte=since)
    lines = [line.line for line in islice(iter_lines(chunks, descending=True), limit)]
    return lines[::-1]
