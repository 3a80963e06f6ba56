"""The Models page `/models/` (your teams' registered versions) and the job page's
"Export model" form (`POST /jobs/<id>/model/`).

The same service and policy as the API's `jobs/{id}/model/`; downloads are the API's
(`/api/v1/models/{id}/download/`, `/api/v1/jobs/{id}/model/`), which take the session.
A refused export gets a page with the error beside the name field and the name typed.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from trainhub.jobs.models import Job
from trainhub.registry.models import MODEL_NAME_HELP, ModelVersion
from trainhub.registry.policies import can_register_model
from trainhub.registry.services import ModelExportError, export_job_model

from .job_detail import visible_job


class ModelExportForm(forms.Form):
    # The name's rule is the service's (`validate_model_name`), as for the API.
    name = forms.CharField(label="Model name", max_length=63, help_text=MODEL_NAME_HELP)


@login_required
def model_list(request: HttpRequest) -> HttpResponse:
    versions = (
        ModelVersion.objects.visible_to(request.user)
        .select_related("team", "job", "created_by")
        .order_by("team__slug", "name", "-version")
    )
    return render(request, "web/model_list.html", {"section": "models", "versions": versions})


@login_required
@require_POST
def model_export(request: HttpRequest, job_id: int) -> HttpResponse:
    job = visible_job(request, job_id)
    if not can_register_model(request.user, job):
        raise PermissionDenied("Viewers cannot register models.")
    form = ModelExportForm(request.POST)
    if not form.is_valid():
        return _refused(request, job, form, status=400)
    user = request.user
    assert isinstance(user, User)  # login_required
    try:
        version = export_job_model(
            job=job, user=user, name=form.cleaned_data["name"], now=timezone.now()
        )
    except ModelExportError as exc:
        form.add_error("name" if exc.field == "name" else None, str(exc))
        return _refused(request, job, form, status=400 if exc.field == "name" else 409)
    messages.success(request, f"Registered {version.name} v{version.version} from job {job.pk}.")
    done = HttpResponseRedirect(reverse("web-model-list"))
    done.status_code = 303  # See Other: the list, fetched with GET
    return done


def _refused(request: HttpRequest, job: Job, form: ModelExportForm, *, status: int) -> HttpResponse:
    context = {"section": "models", "job": job, "form": form}
    return render(request, "web/model_export.html", context, status=status)
