"""Ingesting metric batches and log chunks from agents.

Metric points arrive as columns per series (`codec.Columns`) and are stored as chunks
(`chunks.py`), folded into the series and rollups with array operations. Each batch is
charged to the job's budgets (`budgets.py`): what lies beyond is counted, not stored.
Log text is cleaned (`text.py`) and each line gets its byte offset in its task's stream.
Each stored batch is published (`MetricPointsIngested`, `LogLinesIngested`); the browser
feed (`live.on_event`) pushes it to the job's watchers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from trainhub.events import LogLinesIngested, MetricPointsIngested, publish
from trainhub.jobs.models import Task
from trainhub.opmetrics import INGESTED, OVER_BUDGET

from .budgets import charge_log, charge_points, locked_usage
from .chunks import FULL_CHUNK, chunk_rows, columns_of, compact_due, from_micros
from .codec import Columns
from .models import LogLine, MetricChunk, MetricRollup, MetricSeries
from .progress import note_steps
from .rollups import rollup_columns
from .text import clean_text, storable

MAX_LINE_CHARS = 4000


# A stored point: (name, step, value, time).
PointRow = tuple[str, int, float, datetime]
# A live message carries at most this many buckets per series and batch: a browser gets
# the shape of a flood of points, not the flood (each bucket: last point, min, max).
LIVE_BUCKETS = 32


def _parse_time(value: Any, default: datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else default
    if not isinstance(value, str):
        return default
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return default
    return parsed if parsed.tzinfo is not None else default


def _rows(points: list[dict[str, Any]], now: datetime) -> list[PointRow]:
    """The storable values of reported points; anything else is skipped."""
    rows: list[PointRow] = []
    for point in points:
        if not isinstance(point, dict):
            continue
        step = point.get("step")
        values = point.get("values")
        if type(step) is not int or not isinstance(values, dict):
            continue
        time = _parse_time(point.get("time"), now)
        for name, value in values.items():
            if type(value) is int:
                try:
                    value = float(value)
                except OverflowError:
                    continue
            elif type(value) is not float or not math.isfinite(value):
                continue
            if not isinstance(name, str) or not name or len(name) > 100 or not storable(name):
                continue
            rows.append((name, step, value, time))
    return rows


def ingest_metrics(
    *, task: Task, points: list[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """Store a batch of reported points, fold them into the rollups, and publish what a
    watching browser needs of them (at most `LIVE_BUCKETS` buckets per series); returns
    that.

    Each point is `{"step": int, "time": iso or datetime, "values": {name: number}}`;
    values that are not finite numbers, and names that cannot be stored, are skipped
    rather than failing the whole batch. Values beyond the job's budget of points are
    counted, not stored (nor published).
    """
    return ingest_rows(task=task, rows=_rows(points, now), now=now)


def ingest_rows(
    *, task: Task, rows: list[PointRow], now: datetime | None = None
) -> list[dict[str, Any]]:
    """`ingest_series` for rows that are storable as they are (`checked_rows`)."""
    return ingest_series(task=task, series=columns_of(rows), now=now or timezone.now())


def ingest_series(
    *, task: Task, series: Mapping[str, Columns], now: datetime
) -> list[dict[str, Any]]:
    """`ingest_metrics` for points as columns per name (the agent's metrics message):
    names that cannot be stored are skipped; the first points (by step) that fit the
    job's budget are stored, one chunk per series, and the rest counted. A step
    beyond the task's highest is the job's progress as of `now` (`progress.py`: stall
    detection), whether or not the budget leaves room to store the points."""
    wanted = {n: c for n, c in series.items() if len(c) and len(n) <= 100 and storable(n)}
    total = sum(len(c) for c in wanted.values())
    if not total:
        return []
    with transaction.atomic():
        usage = locked_usage(task.job_id)
        highest = (int(c.steps.max()) for c in wanted.values())
        moved = note_steps(usage, task, highest, now)
        kept = charge_points(usage, total, also=("progress",) if moved else ())
        OVER_BUDGET.labels("metric_points").inc(total - kept)
        stored = wanted if kept == total else _first_points(wanted, kept)
        if stored:
            store_series(task.job_id, task.pk, stored)
    if not stored:
        return []
    INGESTED.labels("metric_points").inc(sum(len(c) for c in stored.values()))
    live = live_buckets(stored)
    publish(MetricPointsIngested(job_id=task.job_id, points=tuple(live)))
    return live


def _first_points(series: Mapping[str, Columns], kept: int) -> dict[str, Columns]:
    """The `kept` points of the lowest steps (of one step: in series, then arrival order):
    for points reported one step at a time, the first ones that arrived."""
    steps = np.concatenate([c.steps for c in series.values()])
    keep = np.zeros(len(steps), dtype=bool)
    keep[np.argsort(steps, kind="stable")[:kept]] = True
    out, at = {}, 0
    for name, columns in series.items():
        mask = keep[at : at + len(columns)]
        at += len(columns)
        if mask.any():
            out[name] = columns.take(mask)
    return out


def store_series(job_id: int, task_id: int | None, series: Mapping[str, Columns]) -> None:
    """Store points as chunks and fold them into the job's series and rollups, with no
    budget (ingest charged it; tools and tests seed with it directly). In one
    transaction: the series rows are upserted first (their lock orders the batches of
    one series), then the chunks written and, when due, a series' small chunks merged."""
    series = {name: columns for name, columns in series.items() if len(columns)}
    if not series:
        return
    with transaction.atomic():
        rows = [
            row
            for name, columns in series.items()
            for row in chunk_rows(job_id, task_id, name, columns)
        ]
        small = Counter(row.name for row in rows if row.count < FULL_CHUNK)
        _store_summaries(job_id, series, small)
        MetricChunk.objects.bulk_create(rows)
        if small:
            compact_due(job_id, small)


def write_points(
    job_id: int,
    rows: Iterable[tuple[str, int, float]],
    *,
    task_id: int | None = None,
    time: datetime | None = None,
) -> None:
    """Store `(name, step, value)` points of a job at `time` (default: now) as ingest
    would, without a budget: how tools, benchmarks and tests seed metrics."""
    when = time or timezone.now()
    store_series(job_id, task_id, columns_of((n, s, float(v), when) for n, s, v in rows))


def live_buckets(series: Mapping[str, Columns]) -> list[dict[str, Any]]:
    """Per series, the batch's points (in the order given) in at most `LIVE_BUCKETS`
    consecutive buckets, each as its last point with the min and max of the bucket (a
    point alone: itself)."""
    live = []
    for name, columns in series.items():
        n = len(columns)
        size = -(-n // LIVE_BUCKETS)  # ceil
        starts = np.arange(0, n, size)
        ends = np.append(starts[1:], n) - 1
        lows = np.minimum.reduceat(columns.values, starts).tolist()
        highs = np.maximum.reduceat(columns.values, starts).tolist()
        steps, values = columns.steps[ends].tolist(), columns.values[ends].tolist()
        times = columns.times[ends].tolist()
        for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            bucket: dict[str, Any] = {
                "name": name,
                "step": steps[i],
                "value": values[i],
                "time": from_micros(times[i]).isoformat(),
            }
            if end > start:
                bucket.update(min=lows[i], max=highs[i], count=end - start + 1)
            live.append(bucket)
    return live


def store_rollups(job_id: int, points: list[tuple[str, int, float]]) -> None:
    """Fold stored `(name, step, value)` points of a job, in arrival order, into its
    series and rollups (`store_series` without the chunks)."""
    series = columns_of((name, step, value, _NO_TIME) for name, step, value in points)
    _store_summaries(job_id, series)


_NO_TIME = datetime(1970, 1, 1, tzinfo=UTC)


def _store_summaries(
    job_id: int, series: Mapping[str, Columns], small: Mapping[str, int] | None = None
) -> None:
    """The batch's series and rollup rows (with the small chunks it adds per name): one
    upsert per table (in key order, so that two batches of one job never wait on each
    other's rows in opposite orders)."""
    small = small or {}
    summaries = rollup_columns(series)
    _upsert(
        MetricSeries._meta.db_table,
        ("job_id", "name", "first_step", "last_step", "count", "small_chunks"),
        ("job_id", "name"),
        [
            (job_id, name, int(c.steps.min()), int(c.steps.max()), len(c), small.get(name, 0))
            for name, c in sorted(series.items())
        ],
    )
    _upsert(
        MetricRollup._meta.db_table,
        (
            "job_id",
            "name",
            "level",
            "block",
            "min_value",
            "max_value",
            "count",
            "last_step",
            "last_value",
        ),
        ("job_id", "name", "level", "block"),
        [
            (job_id, name, level, block, s.min, s.max, s.count, s.last_step, s.last_value)
            for (name, level, block), s in sorted(summaries.items())
        ],
    )


# Rows per upsert statement: 9 parameters each stays well under SQLite's and PostgreSQL's
# limits on bound parameters.
UPSERT_ROWS = 500


_SQL_TYPES = {
    "job_id": "bigint",
    "name": "text",
    "level": "smallint",
    "block": "bigint",
    "first_step": "bigint",
    "last_step": "bigint",
    "count": "bigint",
    "small_chunks": "integer",
    "min_value": "double precision",
    "max_value": "double precision",
    "last_value": "double precision",
}


def _upsert(table: str, columns: tuple[str, ...], key: tuple[str, ...], rows: list[Any]) -> None:
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    merge = {
        "first_step": f"{least}(t.first_step, excluded.first_step)",
        "min_value": f"{least}(t.min_value, excluded.min_value)",
        "max_value": f"{greatest}(t.max_value, excluded.max_value)",
        "count": "t.count + excluded.count",
        "small_chunks": "t.small_chunks + excluded.small_chunks",
        # Read before last_step changes: every SET expression sees the old row.
        "last_value": (
            "CASE WHEN excluded.last_step >= t.last_step"
            " THEN excluded.last_value ELSE t.last_value END"
        ),
        "last_step": f"{greatest}(t.last_step, excluded.last_step)",
    }
    quote = connection.ops.quote_name
    updates = ", ".join(f"{quote(c)} = {merge[c]}" for c in columns if c not in key)
    head = f"INSERT INTO {quote(table)} AS t ({', '.join(quote(c) for c in columns)}) "
    conflict = f"ON CONFLICT ({', '.join(quote(c) for c in key)}) DO UPDATE SET {updates}"
    if connection.vendor == "postgresql":
        # One array per column: a short statement whatever the rows (a VALUES list of
        # thousands of placeholders costs more to parse than to run).
        arrays = ", ".join(f"%s::{_SQL_TYPES[c]}[]" for c in columns)
        with connection.cursor() as cursor:
            cursor.execute(
                f"{head} SELECT * FROM unnest({arrays}) {conflict}",
                [list(column) for column in zip(*rows, strict=True)],
            )
        return
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    with connection.cursor() as cursor:
        for i in range(0, len(rows), UPSERT_ROWS):
            chunk = rows[i : i + UPSERT_ROWS]
            cursor.execute(
                f"{head} VALUES {', '.join([row] * len(chunk))} {conflict}",
                [value for r in chunk for value in r],
            )


def ingest_logs(
    *, task: Task, stream: str, lines: list[Any], now: datetime
) -> list[dict[str, Any]]:
    """Store a chunk of output lines of `task` and publish them; returns those stored.

    Lines are cleaned (NUL and invalid UTF-8 replaced) and cut to MAX_LINE_CHARS; each
    starts at `offset`, the bytes of the task's lines stored before it (with a newline
    after each). Lines beyond the job's log budget are counted, not stored."""
    source = f"{task.role}-{task.index}"
    texts = [clean_text(line)[:MAX_LINE_CHARS] for line in lines]
    if not texts:
        return []
    sizes = [len(text.encode()) + 1 for text in texts]
    with transaction.atomic():
        kept = charge_log(locked_usage(task.job_id), sizes)
        offset = _next_offset(task)
        rows = []
        for text, size in zip(texts[:kept], sizes, strict=False):
            rows.append(
                LogLine(
                    job_id=task.job_id,
                    task=task,
                    source=source,
                    stream=stream[:8],
                    offset=offset,
                    line=text,
                    time=now,
                )
            )
            offset += size
        LogLine.objects.bulk_create(rows)  # sets the ids (PostgreSQL and SQLite RETURNING)
    INGESTED.labels("log_lines").inc(len(rows))
    OVER_BUDGET.labels("log_lines").inc(len(texts) - kept)
    # The ids let a browser line live lines up with `GET …/logs/?after=<id>` history.
    stored = [
        {
            "id": r.pk,
            "task": task.pk,
            "source": source,
            "stream": r.stream,
            "offset": r.offset,
            "line": r.line,
            "time": now.isoformat(),
        }
        for r in rows
    ]
    if stored:
        publish(LogLinesIngested(job_id=task.job_id, lines=tuple(stored)))
    return stored


def _next_offset(task: Task) -> int:
    """Where the task's next line starts: the end of its last stored line (0 if none)."""
    last = LogLine.objects.filter(task=task).order_by("-id").values_list("offset", "line").first()
    return 0 if last is None else last[0] + len(last[1].encode()) + 1
