"""Ingesting metric batches and log chunks from agents.

Each stored batch is published (`MetricPointsIngested`, `LogLinesIngested`); the browser
feed (`live.on_event`) pushes it to the job's watchers.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from trainhub.events import LogLinesIngested, MetricPointsIngested, publish
from trainhub.jobs.models import Task

from .models import LogLine, MetricPoint

MAX_LINE_CHARS = 4000


def _parse_time(value: Any, default: datetime) -> datetime:
    parsed = parse_datetime(value) if isinstance(value, str) else None
    return parsed if parsed is not None and parsed.tzinfo is not None else default


def ingest_metrics(
    *, task: Task, points: list[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """Store a batch of reported points and publish them; returns them flattened.

    Each point is `{"step": int, "time": iso, "values": {name: number}}`; values that are
    not finite numbers are skipped rather than failing the whole batch.
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
    MetricPoint.objects.bulk_create(rows)
    flat = [
        {"name": r.name, "step": r.step, "value": r.value, "time": r.time.isoformat()} for r in rows
    ]
    if flat:
        publish(MetricPointsIngested(job_id=task.job_id, points=tuple(flat)))
    return flat


def ingest_logs(
    *, task: Task, stream: str, lines: list[Any], now: datetime
) -> list[dict[str, Any]]:
    """Store a chunk of output lines of `task` and publish them; returns them as stored."""
    source = f"{task.role}-{task.index}"
    rows = [
        LogLine(
            job_id=task.job_id,
            task=task,
            source=source,
            stream=stream[:8],
            line=str(line)[:MAX_LINE_CHARS],
            time=now,
        )
        for line in lines
    ]
    LogLine.objects.bulk_create(rows)  # sets the ids (PostgreSQL and SQLite RETURNING)
    # The ids let a browser line live lines up with `GET …/logs/?after=<id>` history.
    stored = [
        {"id": r.pk, "source": source, "stream": r.stream, "line": r.line, "time": now.isoformat()}
        for r in rows
    ]
    if stored:
        publish(LogLinesIngested(job_id=task.job_id, lines=tuple(stored)))
    return stored
