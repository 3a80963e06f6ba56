"""Platform admins create, rename, deactivate and reactivate teams on the teams pages,
through the tenancy services (`create_team` and `rename_team` are the REST API's too;
`set_team_active`): the same rules, refusals and audit entries.

A form sent by htmx that is refused comes back alone with its errors (400, or 409 for a
slug that is taken); one that succeeds sends the browser to the team's page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from trainhub.jobs.choices import JOB_ACTIVE
from trainhub.jobs.models import Job
from trainhub.tenancy.policies import can_create_team, can_rename_team
from trainhub.tenancy.services import TenancyError, create_team, rename_team, set_team_active

from ..htmx import is_fragment_request
from ..team_forms import RenameTeamForm, TeamForm
from . import teams


def _to_team(request: HttpRequest, slug: str, notice: str) -> HttpResponse:
    messages.success(request, notice)
    url = reverse("web-team-detail", args=[slug])
    if is_fragment_request(request):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


@login_required
def teams_page(request: HttpRequest) -> HttpResponse:
    """`/teams/`: the list (GET); a new team (POST, platform admins)."""
    if request.method != "POST":
        return teams.team_list(request)
    if not can_create_team(request.user):
        raise PermissionDenied("Only platform admins create teams.")
    form = TeamForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            team = create_team(**form.cleaned_data, actor=request.user)
        except TenancyError as exc:  # the slug is taken
            form.add_error("slug", str(exc))
            status = 409
        else:
            return _to_team(
                request,
                team.slug,
                f"Team {team.slug} created. Give it a quota and add its members below.",
            )
    if is_fragment_request(request):
        return render(request, "web/partials/team_new.html", {"team_form": form}, status=status)
    return teams.team_list(request, team_form=form, status=status)


@login_required
@require_POST
def team_rename(request: HttpRequest, slug: str) -> HttpResponse:
    team = teams.visible_team(request, slug)
    if not can_rename_team(request.user, team):
        raise PermissionDenied("Only platform admins rename teams.")
    form = RenameTeamForm(request.POST)
    if form.is_valid():
        rename_team(team=team, name=form.cleaned_data["name"], actor=request.user)
        return _to_team(request, team.slug, f"Team {team.slug} is now called {team.name}.")
    if is_fragment_request(request):
        context = {"team": team, "rename_form": form}
        return render(request, "web/partials/team_rename.html", context, status=400)
    return teams.team_detail_page(request, team, status=400, rename_form=form)


@login_required
@require_POST
def team_active(request: HttpRequest, slug: str) -> HttpResponse:
    """Deactivate (`active=0`: refused while the team has active jobs) or reactivate
    (`active=1`) a team; a full page answer."""
    team = teams.visible_team(request, slug)
    if not can_rename_team(request.user, team):
        raise PermissionDenied("Only platform admins deactivate teams.")
    active = request.POST.get("active") == "1"
    running = Job.objects.filter(team=team, state__in=JOB_ACTIVE).count()
    try:
        set_team_active(team=team, active=active, active_jobs=running, actor=request.user)
    except TenancyError as exc:
        return teams.team_detail_page(request, team, status=409, active_error=str(exc))
    if active:
        notice = f"Team {team.slug} is active again. Give it a quota to promise it capacity."
    else:
        notice = f"Team {team.slug} is deactivated: it takes no new jobs and its quota is zero."
    return _to_team(request, team.slug, notice)
