"""Pages of the teams area (being built: see issue 12)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "teams", "title": "Teams"})


@login_required
def team_detail(request: HttpRequest, slug: str) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "teams", "title": "Team"})
