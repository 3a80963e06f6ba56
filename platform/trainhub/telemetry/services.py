"""Ingesting metric batches and log chunks from agents.

Each batch is charged to the job's budgets (`budgets.py`): what lies beyond is counted,
not stored. Log text is cleaned (`text.py`) and each line gets its byte offset in its
task's stream. Each stored batch is published (`MetricPointsIngested`,
`LogLinesIngested`); the browser feed (`live.on_event`) pushes it to the job's watchers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from trainhub.events import LogLinesIngested, MetricPointsIngested, publish
from trainhub.jobs.models import Task
from trainhub.opmetrics import INGESTED, OVER_BUDGET

from .budgets import charge_log, charge_points, locked_usage
from .models import LogLine, MetricPoint, MetricRollup, MetricSeries
from .progress import note_steps
from .rollups import rollup
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


def checked_rows(
    points: Iterable[tuple[int | None, datetime | None, Mapping[str, float]]], now: datetime
) -> list[PointRow]:
    """Rows of points already checked by the agent protocol's reader (an integer step in
    range or None, an aware time or None, finite numbers by non-empty names): only what
    storage adds is checked here. A point without a step is not stored, as in `_rows`."""
    rows: list[PointRow] = []
    for step, time, values in points:
        if step is None:
            continue
        when = now if time is None else time
        for name, value in values.items():
            if len(name) <= 100 and storable(name):
                rows.append((name, step, float(value), when))
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
    """`ingest_metrics` for rows that are storable as they are (`checked_rows`). A step
    beyond the task's highest is the job's progress as of `now` (`progress.py`: stall
    detection), whether or not the budget leaves room to store the points."""
    if not rows:
        return []
    with transaction.atomic():
        usage = locked_usage(task.job_id)
        moved = note_steps(usage, task, (step for _, step, _, _ in rows), now or timezone.now())
        kept = charge_points(usage, len(rows), also=("progress",) if moved else ())
        OVER_BUDGET.labels("metric_points").inc(len(rows) - kept)
        del rows[kept:]
        if rows:
            _insert_points(task, rows)
            store_rollups(task.job_id, [(name, step, value) for name, step, value, _ in rows])
    if not rows:
        return []
    INGESTED.labels("metric_points").inc(len(rows))
    live = live_buckets(rows)
    publish(MetricPointsIngested(job_id=task.job_id, points=tuple(live)))
    return live


def _insert_points(task: Task, rows: list[PointRow]) -> None:
    """Raw rows: COPY on PostgreSQL (a tenth of an INSERT's cost), a bulk insert else."""
    if connection.vendor != "postgresql":
        MetricPoint.objects.bulk_create(
            MetricPoint(job_id=task.job_id, task=task, name=n, step=s, value=v, time=t)
            for n, s, v, t in rows
        )
        return
    columns = "(job_id, task_id, name, step, value, time)"
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor
        with raw.copy(f"COPY {MetricPoint._meta.db_table} {columns} FROM STDIN") as copy:
            job, pk = task.job_id, task.pk
            for name, step, value, time in rows:
                copy.write_row((job, pk, name, step, value, time))


def live_buckets(rows: list[PointRow]) -> list[dict[str, Any]]:
    """Per series, the batch's points in at most `LIVE_BUCKETS` consecutive buckets, each
    as its last point with the min and max of the bucket (a point alone: itself)."""
    by_name: dict[str, list[PointRow]] = {}
    for row in rows:
        by_name.setdefault(row[0], []).append(row)
    live = []
    for name, series in by_name.items():
        size = -(-len(series) // LIVE_BUCKETS)  # ceil
        for i in range(0, len(series), size):
            chunk = series[i : i + size]
            values = [v for _, _, v, _ in chunk]
            _, step, value, time = chunk[-1]
            bucket: dict[str, Any] = {
                "name": name,
                "step": step,
                "value": value,
                "time": time.isoformat(),
            }
            if len(chunk) > 1:
                bucket.update(min=min(values), max=max(values), count=len(chunk))
            live.append(bucket)
    return live


# Rows per upsert statement: 9 parameters each stays well under SQLite's and PostgreSQL's
# limits on bound parameters.
UPSERT_ROWS = 500


def store_rollups(job_id: int, points: list[tuple[str, int, float]]) -> None:
    """Fold stored `(name, step, value)` points of a job, in arrival order, into its series
    and rollups: one upsert per table for the whole batch (in key order, so that two
    batches of one job never wait on each other's rows in opposite orders)."""
    if not points:
        return
    series: dict[str, list[int]] = {}  # name -> [first step, last step, count]
    for name, step, _ in points:
        found = series.get(name)
        if found is None:
            series[name] = [step, step, 1]
        else:
            found[0] = min(found[0], step)
            found[1] = max(found[1], step)
            found[2] += 1
    summaries = rollup(points)
    _upsert(
        MetricSeries._meta.db_table,
        ("job_id", "name", "first_step", "last_step", "count"),
        ("job_id", "name"),
        [(job_id, name, *series[name]) for name in sorted(series)],
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


_SQL_TYPES = {
    "job_id": "bigint",
    "name": "text",
    "level": "smallint",
    "block": "bigint",
    "first_step": "bigint",
    "last_step": "bigint",
    "count": "bigint",
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
