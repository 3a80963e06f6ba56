"""Ingesting metric batches and log chunks from agents.

Metric points arrive as columns per series (`codec.Columns`) and are stored as chunks
(`chunks.py`), folded into the series and rollups with array operations
(`storing.py`). Each batch is charged to the job's budgets (`budgets.py`): what lies
beyond is counted, not stored.
Log text is cleaned (`text.py`) and stored as chunks (`logchunks.py`), each line at its
byte offset in its task's stream.
Each stored batch is published (`MetricPointsIngested`, `LogLinesIngested`); the browser
feed (`live.on_event`) pushes it to the job's watchers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np
from django.db import transaction
from django.utils import timezone

from trainhub.events import LogLinesIngested, MetricPointsIngested, publish
from trainhub.jobs.models import Task
from trainhub.opmetrics import INGESTED, OVER_BUDGET

from .budgets import charge_log, charge_points, locked_usage
from .chunks import columns_of, from_micros
from .codec import Columns
from .logchunks import split_lines, store_lines
from .progress import note_steps
from .storing import store_rollups, store_series, write_points
from .text import clean_text, storable

__all__ = [
    "MAX_LINE_CHARS",
    "ingest_logs",
    "ingest_metrics",
    "ingest_rows",
    "ingest_series",
    "live_buckets",
    "store_rollups",
    "store_series",
    "write_points",
]

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
    # No savepoint inside a caller's transaction (the gateway's group commit): a failure
    # fails that transaction whole.
    with transaction.atomic(savepoint=False):
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
    count = sum(len(c) for c in stored.values())
    transaction.on_commit(lambda: INGESTED.labels("metric_points").inc(count))
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


def ingest_logs(
    *, task: Task, stream: str, lines: list[Any], now: datetime
) -> list[dict[str, Any]]:
    """Store a batch of output lines of `task` as chunks (`logchunks.py`) and publish
    them; returns those stored, with their ids.

    Lines are cleaned (NUL and invalid UTF-8 replaced); a line holding newlines is the
    lines it holds; each is cut to MAX_LINE_CHARS and starts at `offset`, the bytes of the
    task's lines stored before it (with a newline after each). Lines beyond the job's log
    budget are counted, not stored."""
    source = f"{task.role}-{task.index}"
    texts = [text[:MAX_LINE_CHARS] for text in split_lines(clean_text(x) for x in lines)]
    if not texts:
        return []
    sizes = [len(text.encode()) + 1 for text in texts]
    with transaction.atomic(savepoint=False):
        kept = charge_log(locked_usage(task.job_id), sizes)
        rows = store_lines(
            job_id=task.job_id,
            task_id=task.pk,
            source=source,
            stream=stream,
            texts=texts[:kept],
            time=now,
        )
    INGESTED.labels("log_lines").inc(len(rows))
    OVER_BUDGET.labels("log_lines").inc(len(texts) - kept)
    # The ids let a browser line live lines up with `GET …/logs/?after=<id>` history.
    stored = [row.as_dict() for row in rows]
    if stored:
        publish(LogLinesIngested(job_id=task.job_id, lines=tuple(stored)))
    return stored
