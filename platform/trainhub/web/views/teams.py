"""The teams pages: every team the user can see with its usage, and one team's members,
quota, caps and jobs. Team admins change the members (by username or e-mail) and platform
admins the quota, through the services the REST API calls (`trainhub.tenancy.services`);
creating and renaming teams is in `team_admin`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from trainhub.jobs.choices import JOB_ACTIVE
from trainhub.jobs.models import Job
from trainhub.jobs.usage import QuotaUsage, held_by, quota_usage
from trainhub.tenancy.choices import Priority, Role
from trainhub.tenancy.models import Membership, Quota, Team
from trainhub.tenancy.policies import (
    can_change_quota,
    can_create_team,
    can_manage_members,
    can_rename_team,
    can_view_team,
    is_platform_admin,
)
from trainhub.tenancy.resources import RESOURCE_NAMES, Resources
from trainhub.tenancy.services import (
    TenancyError,
    add_member,
    remove_member,
    set_priority_caps,
    set_quota,
)

from ..htmx import is_fragment_request, render_page
from ..notification_context import team_notifications
from ..team_forms import (
    RESOURCE_LABELS,
    MemberForm,
    QuotaForm,
    RenameTeamForm,
    RoleForm,
    TeamForm,
)

TEAMS_PER_PAGE = 50
MEMBERS_PER_PAGE = 50
RECENT_JOBS = 10
MANAGE_REFUSED = "Only team admins change the team's members."
SHORT_LABELS = {"cpu": "CPU cores", "memory_mb": "Memory", "gpu": "GPUs"}


def _amount(resource: str, value: float | None) -> str:
    if value is None:
        return "unlimited"
    if resource == "memory_mb" and value:
        return f"{value / 1024:.3g} GiB" if value >= 1024 else f"{value:g} MiB"
    return f"{round(value, 2):g}"


@dataclass(frozen=True)
class UsageRow:
    """One resource's bar: what is used within the quota, borrowed beyond it, and lent."""

    label: str
    nominal: str
    used: str
    borrowed: str
    lent: str
    borrowing_limit: str
    lending_limit: str
    used_pct: float
    borrowed_pct: float
    lent_pct: float


def usage_rows(quota: Quota, usage: QuotaUsage, *, all_resources: bool) -> list[UsageRow]:
    """Bars scaled to the larger of the quota and the use; resources a team neither has
    nor uses are left out unless `all_resources`."""
    rows = []
    for name in RESOURCE_NAMES:
        nominal, used = getattr(quota.nominal, name), getattr(usage.used, name)
        within, borrowed = getattr(usage.within_quota, name), getattr(usage.borrowed, name)
        lent = getattr(usage.lent, name)
        if not all_resources and name != "cpu" and not (nominal or used or lent):
            continue
        scale = max(nominal, used, within + lent) or 1
        rows.append(
            UsageRow(
                label=SHORT_LABELS[name],
                nominal=_amount(name, nominal),
                used=_amount(name, used),
                borrowed=_amount(name, borrowed),
                lent=_amount(name, lent),
                borrowing_limit=_amount(name, getattr(quota.borrowing_limit, name)),
                lending_limit=_amount(name, getattr(quota.lending_limit, name)),
                used_pct=round(100 * within / scale, 2),
                borrowed_pct=round(100 * borrowed / scale, 2),
                lent_pct=round(100 * lent / scale, 2),
            )
        )
    return rows


def _quota_of(team: Team) -> Quota:
    """The team's quota (every team gets one when created; an empty one otherwise)."""
    try:
        return team.quota
    except Quota.DoesNotExist:
        return Quota(team=team)


def visible_team(request: HttpRequest, slug: str) -> Team:
    """The team, or 404 when the user may not see it (as in the API)."""
    teams = Team.objects.visible_to(request.user).select_related("quota")
    return get_object_or_404(teams, slug=slug)


@login_required
def team_list(
    request: HttpRequest, team_form: TeamForm | None = None, status: int = 200
) -> HttpResponse:
    """The list; platform admins also get the new-team form (`team_admin.teams_page`
    posts it and, when refused, shows it here again with its errors)."""
    visible = Team.objects.visible_to(request.user).values("pk")
    user = request.user
    assert isinstance(user, User), "login_required lets only signed-in users in"
    my_role = Membership.objects.filter(team=OuterRef("pk"), user=user).values("role")
    teams = (
        Team.objects.filter(pk__in=visible)
        .select_related("quota")
        .annotate(
            member_count=Count("memberships", distinct=True),
            active_jobs=Count("jobs", filter=Q(jobs__state__in=JOB_ACTIVE), distinct=True),
            my_role=Subquery(my_role[:1]),
        )
        .order_by("slug")
    )
    page = Paginator(teams, TEAMS_PER_PAGE).get_page(request.GET.get("page"))
    usage = quota_usage([t.pk for t in page])
    outside = "Platform admin" if is_platform_admin(request.user) else ""
    rows = [
        {
            "team": t,
            "role": Role(role).label if (role := getattr(t, "my_role", None)) else outside,
            "usage": usage_rows(_quota_of(t), usage[t.pk], all_resources=False),
        }
        for t in page
    ]
    context: dict[str, Any] = {"section": "teams", "page": page, "rows": rows}
    if can_create_team(user):
        context["team_form"] = team_form or TeamForm()
    return render_page(
        request, "web/team_list.html", "web/partials/team_table.html", context, status=status
    )


def _detail_context(request: HttpRequest, team: Team, **extra: Any) -> dict[str, Any]:
    user = request.user
    members = team.memberships.select_related("user").order_by("user__username")
    usage = quota_usage([team.pk])[team.pk]
    caps = {cap.priority: cap for cap in team.priority_caps.all()}
    priorities = []
    for priority, title in Priority.choices:
        cap = caps.get(priority)
        held = usage.held_by_priority.get(priority, Resources())
        requested = usage.requested_by_priority.get(priority, Resources())
        priorities.append(
            {
                "title": title,
                "cells": [
                    {
                        "held": _amount(n, getattr(held, n)),
                        "requested": _amount(n, getattr(requested, n)),
                        "cap": _amount(n, getattr(cap, n) if cap else None),
                    }
                    for n in RESOURCE_NAMES
                ],
            }
        )
    quota_editable = can_change_quota(user, team)
    context: dict[str, Any] = {
        "section": "teams",
        "team": team,
        "can_manage": can_manage_members(user, team),
        "quota_editable": quota_editable,
        "members": Paginator(members, MEMBERS_PER_PAGE).get_page(request.GET.get("page")),
        "roles": Role.choices,
        "member_form": MemberForm(),
        "usage": usage_rows(_quota_of(team), usage, all_resources=True),
        "resource_labels": [SHORT_LABELS[n] for n in RESOURCE_NAMES],
        "form_labels": [RESOURCE_LABELS[n] for n in RESOURCE_NAMES],
        "priorities": priorities,
        "jobs": Job.objects.visible_to(user)
        .filter(team=team)
        .select_related("submitted_by")
        .order_by("-created_at")[:RECENT_JOBS],
        "admin_url": reverse("admin:tenancy_team_change", args=[team.pk]),
        "can_rename": can_rename_team(user, team),
    }
    if context["can_rename"]:
        context["rename_form"] = RenameTeamForm(initial={"name": team.name})
    if quota_editable:
        context["quota_form"] = QuotaForm(
            initial=QuotaForm.initial_for(_quota_of(team), list(caps.values()))
        )
    if context["can_manage"] and not is_fragment_request(request):
        context.update(team_notifications(team))  # team admins' webhooks (views/notifications.py)
    context.update(extra)
    return context


@login_required
def team_detail(request: HttpRequest, slug: str) -> HttpResponse:
    return team_detail_page(request, visible_team(request, slug))


def team_detail_page(
    request: HttpRequest, team: Team, *, status: int = 200, **extra: Any
) -> HttpResponse:
    context = _detail_context(request, team, **extra)
    return render_page(
        request, "web/team_detail.html", "web/partials/team_members.html", context, status=status
    )


def _members_answer(
    request: HttpRequest, team: Team, notice: str = "", *, status: int = 200, **extra: Any
) -> HttpResponse:
    """After a membership change: the members section for htmx, else back to the page
    (the page again, with the errors, when refused)."""
    if status == 200 and not can_view_team(request.user, team):  # removed themselves
        url = reverse("web-team-list")
        if is_fragment_request(request):
            response = HttpResponse(status=204)
            response["HX-Redirect"] = url
            return response
        return redirect(url)
    if status == 200 and not is_fragment_request(request):
        messages.success(request, notice)
        return redirect("web-team-detail", slug=team.slug)
    context = _detail_context(request, team, notice=notice, **extra)
    return render_page(
        request, "web/team_detail.html", "web/partials/team_members.html", context, status=status
    )


def _managed_team(request: HttpRequest, slug: str) -> Team:
    team = visible_team(request, slug)
    if not can_manage_members(request.user, team):
        raise PermissionDenied(MANAGE_REFUSED)
    return team


@login_required
@require_POST
def member_add(request: HttpRequest, slug: str) -> HttpResponse:
    """Add a member, or change the role of one already in the team (as the API does)."""
    team = _managed_team(request, slug)
    form = MemberForm(request.POST)
    if not form.is_valid():
        return _members_answer(request, team, status=400, member_form=form)
    assert form.user is not None
    role = Role(form.cleaned_data["role"])
    add_member(team=team, user=form.user, role=role, actor=request.user)
    return _members_answer(request, team, f"{form.user.username} is now {_a(role.label.lower())}.")


@login_required
@require_POST
def member_role(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    team = _managed_team(request, slug)
    membership = get_object_or_404(
        Membership.objects.select_related("user"), team=team, user__username=username
    )
    form = RoleForm(request.POST)
    if not form.is_valid():
        error = " ".join(str(e) for e in form.errors["role"])
        return _members_answer(request, team, status=400, row_error=(username, error))
    role = Role(form.cleaned_data["role"])
    try:
        add_member(team=team, user=membership.user, role=role, actor=request.user)
    except TenancyError as exc:
        return _members_answer(request, team, status=409, row_error=(username, str(exc)))
    return _members_answer(request, team, f"{username} is now {_a(role.label.lower())}.")


@login_required
@require_POST
def member_remove(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    team = _managed_team(request, slug)
    membership = get_object_or_404(
        Membership.objects.select_related("user"), team=team, user__username=username
    )
    try:
        remove_member(membership=membership, actor=request.user)
    except TenancyError as exc:
        return _members_answer(request, team, status=409, row_error=(username, str(exc)))
    return _members_answer(request, team, f"{username} is no longer a member.")


@login_required
@require_POST
def team_quota(request: HttpRequest, slug: str) -> HttpResponse:
    """Platform admins set the quota and the caps, as `PUT /api/v1/teams/<slug>/quota/`."""
    team = visible_team(request, slug)
    if not can_change_quota(request.user, team):
        raise PermissionDenied("Only platform admins change quotas.")
    form = QuotaForm(request.POST)
    if form.is_valid():
        try:
            with transaction.atomic():  # quota and caps together, or neither
                set_quota(
                    team=team,
                    values=form.values(),
                    actor=request.user,
                    held_by_production=held_by([team.pk]).get(team.pk, {}).get(Priority.PRODUCTION),
                )
                set_priority_caps(team=team, caps=form.caps(), actor=request.user)
        except TenancyError as exc:
            form.add_error(None, str(exc))
    page, fragment = "web/team_detail.html", "web/partials/team_quota.html"
    if not form.is_valid():
        context = _detail_context(request, team, quota_form=form)
        return render_page(request, page, fragment, context, status=400)
    notice = "Quota saved; the scheduler applies it in its next cycle."
    if not is_fragment_request(request):
        messages.success(request, notice)
        return redirect("web-team-detail", slug=team.slug)
    team = visible_team(request, slug)  # re-read the saved quota
    return render_page(request, page, fragment, _detail_context(request, team, quota_notice=notice))


def _a(role: str) -> str:
    """A role with its article: "a member", "an admin", "a viewer"."""
    return f"an {role}" if role[:1] in "aeiou" else f"a {role}"
