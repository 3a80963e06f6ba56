"""`/jobs/`: the jobs of the user's teams, filtered as the API filters them (`JobFilter`),
paginated, with each pending job's queue position and reason.

The table is an htmx fragment: a filter change or a page link swaps just the table (and
pushes the URL, so it keeps the filters), and the table re-fetches itself every 4 s while
the page is visible. Polling rather than a WebSocket: what the list shows (queue positions
above all) changes with every cycle, not only with events of the listed jobs, and one
constant-cost query set every 4 s is cheaper than a feed per filter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from trainhub.experiments.selectors import with_trials
from trainhub.jobs.choices import JobState, Priority
from trainhub.jobs.filters import JobFilter
from trainhub.jobs.models import Job
from trainhub.scheduling.queue import queue_positions
from trainhub.telemetry.finals import final_values
from trainhub.tenancy.models import Team

from ..htmx import render_page

PAGE_SIZE = 50
REFRESH_SECONDS = 4
COMPARE_MIN, COMPARE_MAX = 2, 6


MAX_METRIC_COLUMNS = 5
_METRIC_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,100}")


@dataclass(frozen=True)
class Row:
    job: Job
    position: int | None  # in the queue, for a pending job
    duration: str  # how long it ran (so far), "" before it started
    finals: tuple[str, ...] = ()  # the chosen metrics' last values, "—" for none


def metric_columns(raw: str) -> tuple[list[str], str]:
    """The metric names of `?metrics=a,b` (deduplicated, in order) and an error ("" if none)."""
    names: list[str] = []
    for part in raw.split(","):
        name = part.strip()
        if not name:
            continue
        if not _METRIC_NAME.fullmatch(name):
            return [], (
                f"“{name[:40]}” is not a metric name: letters, digits and _ . : / - only, "
                "up to 100 characters."
            )
        if name not in names:
            names.append(name)
    if len(names) > MAX_METRIC_COLUMNS:
        return [], f"Show at most {MAX_METRIC_COLUMNS} metrics at once; {len(names)} were given."
    return names, ""


def run_time(job: Job, now: datetime) -> str:
    """`4 min 10 s`, `2 h 5 min`: from its start to its end (or now, while it runs)."""
    if job.started_at is None:
        return ""
    return span_text(job.started_at, job.finished_at, now)


def span_text(started: datetime, finished: datetime | None, now: datetime) -> str:
    """`4 min 10 s`, `2 h 5 min`: from `started` to `finished` (or now, while it runs)."""
    seconds = int(((finished or now) - started).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    jobs = with_trials(
        Job.objects.visible_to(request.user)
        .select_related("team", "submitted_by")
        .defer("spec", "runtime_token")
    )
    filters = JobFilter(request.GET, queryset=jobs.order_by("-id"))
    # An invalid filter (an unknown state) lists nothing, as the API refuses it.
    matching = filters.qs if filters.is_valid() else jobs.none()
    page = Paginator(matching, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = list(page.object_list)
    pending = [job.pk for job in rows if job.state == JobState.PENDING]
    positions = queue_positions(pending) if pending else {}
    metrics, metrics_error = metric_columns(request.GET.get("metrics", ""))
    finals: dict[str, dict[int, str]] = {}
    if metrics and rows:
        for metric in final_values([job.pk for job in rows], metrics):
            finals[metric.name] = {
                job_id: cell.final
                for job_id, cell in zip((job.pk for job in rows), metric.cells, strict=True)
                if cell is not None
            }
    now = timezone.now()
    context = {
        "section": "jobs",
        "filters": filters,
        "page": page,
        "rows": [
            Row(
                job,
                positions.get(job.pk),
                run_time(job, now),
                tuple(finals.get(name, {}).get(job.pk, "—") for name in metrics),
            )
            for job in rows
        ],
        "metrics": metrics,
        "metrics_text": ", ".join(metrics) if not metrics_error else request.GET["metrics"],
        "metrics_error": metrics_error,
        "teams": Team.objects.visible_to(request.user).order_by("slug").only("slug", "name"),
        "states": JobState.choices,
        "priorities": Priority.choices,
        "selected": {
            "state": request.GET.getlist("state"),
            "priority": request.GET.getlist("priority"),
        },
        "refresh_seconds": REFRESH_SECONDS,
        "compare_min": COMPARE_MIN,
        "compare_max": COMPARE_MAX,
    }
    return render_page(request, "web/job_list.html", "web/partials/job_table.html", context)
