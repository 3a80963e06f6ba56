"""Ingesting metric batches and log chunks from agents.

Each batch is charged to the job's budgets (`budgets.py`): what lies beyond is counted,
not stored. Log text is cleaned (`text.py`) and each line gets its byte offset in its
task's stream. Each stored batch is published (`MetricPointsIngested`,
`LogLinesIngested`); the browser feed (`live.on_event`) pushes it to the job's watchers.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils.dateparse import parse_datetime

from trainhub.events import LogLinesIngested, MetricPointsIngested, publish
from trainhub.jobs.models import Task

from .budgets import charge_log, charge_points, locked_usage
from .models import LogLine, MetricPoint, MetricRollup, MetricSeries
from .rollups import rollup
from .text import clean_text, storable

MAX_LINE_CHARS = 4000


def _parse_time(value: Any, default: datetime) -> datetime:
    parsed = parse_datetime(value) if isinstance(value, str) else None
    return parsed if parsed is not None and parsed.tzinfo is not None else default


def ingest_metrics(
    *, task: Task, points: list[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """Store a batch of reported points and publish them; returns those stored, flattened.

    Each point is `{"step": int, "time": iso, "values": {name: number}}`; values that are
    not finite numbers, and names that cannot be stored, are skipped rather than failing
    the whole batch. Values beyond the job's budget of points are counted, not stored.
    """
    rows: list[MetricPoint] = []
    for point in points:
        step = point.get("step")
        values = point.get("values")
        if not isinstance(step, int) or not isinstance(values, dict):
            continue
        time = _parse_time(point.get("time"), now)
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(value) or not isinstance(name, str) or len(name) > 100:
                continue
            if not storable(name):
                continue
            rows.append(
                MetricPoint(
                    job_id=task.job_id,
                    task=task,
                    name=name,
                    step=step,
                    value=float(value),
                    time=time,
                )
            )
    if not rows:
        return []
    with transaction.atomic():
        kept = charge_points(locked_usage(task.job_id), len(rows))
        del rows[kept:]
        MetricPoint.objects.bulk_create(rows)
        store_rollups(task.job_id, [(r.name, r.step, r.value) for r in rows])
    flat = [
        {"name": r.name, "step": r.step, "value": r.value, "time": r.time.isoformat()} for r in rows
    ]
    if flat:
        publish(MetricPointsIngested(job_id=task.job_id, points=tuple(flat)))
    return flat


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
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    with connection.cursor() as cursor:
        for i in range(0, len(rows), UPSERT_ROWS):
            chunk = rows[i : i + UPSERT_ROWS]
            cursor.execute(
                f"INSERT INTO {quote(table)} AS t ({', '.join(quote(c) for c in columns)}) "
                f"VALUES {', '.join([row] * len(chunk))} "
                f"ON CONFLICT ({', '.join(quote(c) for c in key)}) DO UPDATE SET {updates}",
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
