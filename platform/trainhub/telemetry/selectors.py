"""Reading metrics and logs back."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from trainhub.jobs.models import Job

from .models import LogLine, MetricPoint


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


def log_lines(job: Job, *, after_id: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
    rows = LogLine.objects.filter(job=job, id__gt=after_id).order_by("id")[:limit]
    return [
        {
            "id": r.id,
            "source": r.source,
            "stream": r.stream,
            "line": r.line,
            "time": r.time.isoformat(),
        }
        for r in rows
    ]
