"""Pages of the account area (being built: see issue 12)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def account(request: HttpRequest) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "account", "title": "Account"})
