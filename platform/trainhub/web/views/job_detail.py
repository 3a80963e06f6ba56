"""The job page `/jobs/<id>/` and the fragments its live parts refresh.

The page is an overview with tabs (as Determined's trial page): summary, result and
charts, tasks; logs; events; checkpoints; configuration. Its live parts come over the
job's WebSocket (frontend/src/pages/job.js); the task table and the queue box are htmx
fragments of their own, so a task change re-renders the table, not the page.
"""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.template.defaultfilters import filesizeformat
from django.template.loader import render_to_string
from django.utils import timezone

from trainhub.experiments.models import Trial
from trainhub.jobs.choices import JOB_TERMINAL, JobState
from trainhub.jobs.models import Job, Task
from trainhub.jobs.policies import can_cancel, can_clone, can_scale
from trainhub.scheduling.preview import forecast_start
from trainhub.scheduling.queue import queue_positions
from trainhub.telemetry.models import JobTelemetry
from trainhub.telemetry.results import coordinator_result, result_rows

# The newest events the page shows; the API (`events/`) has them all.
EVENTS_SHOWN = 200
# Beside the `preparing` badge while the job says nothing more (job.js shows it too).
PREPARING_NOTE = "a node is building the job's Python environment (its tasks show how far)"

TASKS_FRAGMENT = "web/partials/job_detail_tasks.html"
QUEUE_FRAGMENT = "web/partials/job_detail_queue.html"


def visible_job(request: HttpRequest, job_id: int) -> Job:
    """The job if the user may see it; 404 otherwise (as the API does)."""
    return get_object_or_404(
        Job.objects.visible_to(request.user).select_related("team", "submitted_by", "telemetry"),
        pk=job_id,
    )


def job_tasks_of(job: Job) -> list[Task]:
    return list(job.tasks.select_related("node").order_by("role", "index"))


def queue_context(job: Job, *, position: bool = True) -> dict[str, Any]:
    """Where a pending job stands in the queue (position 1 is tried first).

    Ranking reads every pending job, so the page leaves the position to its fragment
    (`position=False`), which the page loads at once and then every few seconds."""
    if job.state != JobState.PENDING:
        return {"job": job, "queue_position": None, "queue_length": None, "queue_lazy": False}
    if not position:
        return {"job": job, "queue_position": None, "queue_length": None, "queue_lazy": True}
    ranks = queue_positions()
    return {
        "job": job,
        "estimated_start": forecast_start(job, now=timezone.now()),
        "queue_position": ranks.get(job.pk),
        "queue_length": len(ranks),
        "queue_lazy": False,
    }


def telemetry_notices(job: Job) -> list[str]:
    """What the job's telemetry budgets dropped and retention deleted, as sentences for
    the page; none when nothing was (`job` read with `select_related("telemetry")`)."""
    try:
        usage = job.telemetry
    except JobTelemetry.DoesNotExist:
        return []
    notices = []
    if usage.points_dropped:
        notices.append(
            f"{usage.points_dropped:,} metric points were not stored: the job reached its "
            f"budget of {settings.TELEMETRY_METRIC_POINTS_PER_JOB:,} points."
        )
    if usage.log_lines_dropped:
        notices.append(
            f"{usage.log_lines_dropped:,} log lines "
            f"({filesizeformat(usage.log_bytes_dropped)}) were not stored: the job's log "
            f"reached its budget of {filesizeformat(settings.TELEMETRY_LOG_BYTES_PER_JOB)}."
        )
    if usage.purged_at is not None:
        notices.append(
            f"Raw metric points and log lines were deleted on {usage.purged_at:%Y-%m-%d} "
            "(retention); charts show blocks of 16 steps."
        )
    return notices


def action_context(
    request: HttpRequest,
    job: Job,
    *,
    notice: str = "",
    action_error: str = "",
    scale_error: str = "",
    scale_value: str | None = None,
) -> dict[str, Any]:
    """What the actions partial shows: only what the user may do to the job now."""
    active = job.state not in JOB_TERMINAL
    spec = job.job_spec
    target = job.target_workers or spec.workers.min
    return {
        "job": job,
        "active": active,
        "may_cancel": active and can_cancel(request.user, job),
        "may_scale": active
        and spec.workers.min < spec.workers.max
        and can_scale(request.user, job),
        "may_clone": can_clone(request.user, job),
        "workers_min": spec.workers.min,
        "workers_max": spec.workers.max,
        "workers_target": target,
        "scale_value": str(target) if scale_value is None else scale_value,
        "notice": notice,
        "action_error": action_error,
        "scale_error": scale_error,
    }


def page_context(request: HttpRequest, job: Job, **actions: Any) -> dict[str, Any]:
    """Everything the job page renders (`actions`: see `action_context`)."""
    tasks = job_tasks_of(job)
    newest = list(job.events.order_by("-time", "-id")[: EVENTS_SHOWN + 1])
    checkpoint_events = list(
        job.events.filter(Q(kind="checkpoint") | Q(reason__icontains="checkpoint"))
    )
    spec = job.job_spec
    return {
        **action_context(request, job, **actions),
        **queue_context(job, position=False),
        "section": "jobs",
        "spec": spec,
        "spec_yaml": yaml.safe_dump(job.spec, sort_keys=False, default_flow_style=False),
        "tasks": tasks,
        "log_sources": sorted({f"{t.role}-{t.index}" for t in tasks}),
        "events": newest[:EVENTS_SHOWN][::-1],
        "events_truncated": len(newest) > EVENTS_SHOWN,
        "checkpoint_events": checkpoint_events,
        "checkpoint_dir": job.checkpoint_dir,
        "result_rows": result_rows(coordinator_result(job.pk)) if job.state in JOB_TERMINAL else [],
        "telemetry_notices": telemetry_notices(job),
        "preparing_note": PREPARING_NOTE,
        # The trial this job runs (an experiment's), if any.
        "trial": Trial.objects.filter(first_job_id=job.checkpoints_of_id or job.pk)
        .select_related("experiment")
        .first(),
    }


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = visible_job(request, job_id)
    return render(request, "web/job_detail.html", page_context(request, job))


def _fragment(template: str, context: dict[str, Any]) -> HttpResponse:
    # No request context: a fragment has no navigation, so it skips that query.
    return HttpResponse(render_to_string(template, context))


@login_required
def job_tasks(request: HttpRequest, job_id: int) -> HttpResponse:
    """The task table alone (refreshed by the page when a task changes)."""
    job = visible_job(request, job_id)
    return _fragment(TASKS_FRAGMENT, {"job": job, "tasks": job_tasks_of(job)})


@login_required
def job_queue(request: HttpRequest, job_id: int) -> HttpResponse:
    """The why-pending box alone (refreshed while the job waits)."""
    job = visible_job(request, job_id)
    return _fragment(QUEUE_FRAGMENT, queue_context(job))
