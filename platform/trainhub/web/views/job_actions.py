"""What a member does to a job from its page: cancel it, scale it.

The same services and policies as the API's `cancel/` and `scale/` (one validation path,
one set of messages). An htmx post gets the actions partial back (with the outcome, or
the error beside the field it names); a plain post is redirected to the job page, or
gets the page again with the error.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from trainhub.jobs.models import Job
from trainhub.jobs.policies import can_cancel, can_scale
from trainhub.jobs.services import (
    JobStateError,
    PriorityCapExceeded,
    ScaleError,
    cancel_job,
    scale_job,
)

from ..htmx import is_fragment_request
from .job_detail import action_context, page_context, visible_job

ACTIONS_FRAGMENT = "web/partials/job_detail_actions.html"


class ScaleForm(forms.Form):
    # The range (the spec's workers.min..max) is checked by `scale_job`, as for the API.
    workers = forms.IntegerField(label="Workers")


def _answer(request: HttpRequest, job: Job, *, status: int = 200, **outcome: Any) -> HttpResponse:
    """The outcome: the actions partial for htmx, else the page again (an error) or a
    redirect to it (done)."""
    job.refresh_from_db()
    if is_fragment_request(request):
        # 200 even for a refusal: htmx swaps only successful answers, and the partial
        # carries the error.
        return render(request, ACTIONS_FRAGMENT, action_context(request, job, **outcome))
    if status == 200:
        done = HttpResponseRedirect(reverse("web-job-detail", args=[job.pk]))
        done.status_code = 303  # See Other: the page, fetched with GET
        return done
    return render(
        request, "web/job_detail.html", page_context(request, job, **outcome), status=status
    )


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = visible_job(request, job_id)
    if not can_cancel(request.user, job):
        raise PermissionDenied("Viewers cannot cancel jobs.")
    try:
        cancel_job(job=job, actor=str(request.user), now=timezone.now())
    except JobStateError as exc:
        return _answer(request, job, status=409, action_error=str(exc))
    return _answer(request, job, notice="Cancelled: its tasks are being stopped.")


@login_required
@require_POST
def job_scale(request: HttpRequest, job_id: int) -> HttpResponse:
    job = visible_job(request, job_id)
    if not can_scale(request.user, job):
        raise PermissionDenied("Viewers cannot scale jobs.")
    typed = request.POST.get("workers", "")
    form = ScaleForm(request.POST)
    if not form.is_valid():
        return _answer(
            request, job, status=400, scale_error=form.errors["workers"][0], scale_value=typed
        )
    workers = form.cleaned_data["workers"]
    try:
        scale_job(job=job, workers=workers, actor=str(request.user), now=timezone.now())
    except ScaleError as exc:
        return _answer(request, job, status=400, scale_error=str(exc), scale_value=typed)
    except (JobStateError, PriorityCapExceeded) as exc:
        return _answer(request, job, status=409, action_error=str(exc), scale_value=typed)
    return _answer(
        request,
        job,
        notice=f"Target set to {workers} workers: the scheduler resizes the job at its next "
        "cycle (a target you set is not held back by the freeze window, which only spaces "
        "the scheduler's own resizes).",
    )
