"""Server-rendered pages; live parts are driven by frontend/src over the job WebSocket."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from trainhub.jobs.models import Job


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    jobs = Job.objects.visible_to(request.user).select_related("team")[:200]
    return render(request, "web/job_list.html", {"jobs": jobs})


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "submit", "title": "Submit a job"})
