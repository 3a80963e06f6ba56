"""Server-rendered pages; live parts are driven by frontend/src over the job WebSocket."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from trainhub.jobs.models import Job


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(
        Job.objects.visible_to(request.user).select_related("team", "submitted_by"), pk=job_id
    )
    tasks = job.tasks.select_related("node").order_by("role", "index")
    return render(
        request, "web/job_detail.html", {"job": job, "tasks": tasks, "events": job.events.all()}
    )


@login_required
def job_compare(request: HttpRequest) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "jobs", "title": "Compare jobs"})
