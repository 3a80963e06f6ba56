"""The what-if page (`/whatif/`): the recorded history replayed with changed quotas or
policy settings (`trainhub.scheduling.whatif`), per team beside what actually happened.
Platform admins change any team's quota; team admins their own teams'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from trainhub.scheduling.whatif import Outcome, WhatIfError, as_seen_by, what_if
from trainhub.tenancy.choices import MEMBERSHIP_MANAGERS
from trainhub.tenancy.models import Membership, Quota, Team
from trainhub.tenancy.policies import is_platform_admin

from ..htmx import render_page
from ..whatif_forms import WhatIfForm


@dataclass(frozen=True)
class Cell:
    actual: str
    replay: str
    whatif: str
    change: str
    better: bool | None  # None: unchanged


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.1f} min"


def _cell(actual: float, replay: float, whatif: float, fmt: Any, lower_is_better: bool) -> Cell:
    delta = whatif - replay
    better = None if abs(delta) < 1e-9 else (delta < 0) == lower_is_better
    sign = "+" if delta > 0 else ("-" if delta < 0 else "±")
    return Cell(fmt(actual), fmt(replay), fmt(whatif), f"{sign}{fmt(abs(delta))}", better)


def _row(team: str, a: Outcome, r: Outcome, w: Outcome) -> dict[str, Any]:
    def hours(v: float) -> str:
        return f"{v:,.1f} h"

    return {
        "team": team,
        "jobs": a.jobs,
        "never_started": w.never_started,
        "cells": [
            ("Wait", _cell(a.wait_s, r.wait_s, w.wait_s, _minutes, True)),
            ("Completion time", _cell(a.jct_s, r.jct_s, w.jct_s, _minutes, True)),
            ("CPU-hours", _cell(a.cpu_hours, r.cpu_hours, w.cpu_hours, hours, False)),
            ("GPU-hours", _cell(a.gpu_hours, r.gpu_hours, w.gpu_hours, hours, False)),
        ],
    }


@login_required
def whatif_page(request: HttpRequest) -> HttpResponse:
    user: Any = request.user
    quotas = Quota.objects.select_related("team").order_by("team__slug")
    visible: set[str] | None = None
    if not is_platform_admin(user):
        administered = Membership.objects.filter(user=user, role__in=MEMBERSHIP_MANAGERS)
        quotas = quotas.filter(team__in=administered.values("team"))
        visible = set(Team.objects.visible_to(user).values_list("slug", flat=True))
    changeable = list(quotas)
    if not changeable:
        raise PermissionDenied("Only platform admins and team admins run a what-if.")
    form = WhatIfForm(
        request.GET if "days" in request.GET else None,
        quotas=changeable,
        platform_policy=settings.SCHEDULER_POLICY,
    )
    context: dict[str, Any] = {"section": "whatif", "form": form, "result": None}
    if form.is_bound and form.is_valid():
        try:
            result = what_if(timezone.now(), form.cleaned_data["days"], form.scenario())
        except WhatIfError as exc:
            form.add_error("days" if exc.field == "days" else None, str(exc))
        else:
            context["result"] = result
            context["rows"] = [
                _row(r.team, r.actual, r.replay, r.whatif)
                for r in as_seen_by(result, visible)
                if result.jobs
            ]
    status = 400 if form.is_bound and form.errors else 200
    return render_page(
        request, "web/whatif.html", "web/partials/whatif_result.html", context, status=status
    )
