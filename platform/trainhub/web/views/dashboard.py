"""Pages of the dashboard area (being built: see issue 12)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "dashboard", "title": "Dashboard"})
