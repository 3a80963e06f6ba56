"""Pages of the nodes area (being built: see issue 12)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def node_list(request: HttpRequest) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "nodes", "title": "Nodes"})


@login_required
def node_detail(request: HttpRequest, node_id: int) -> HttpResponse:
    return render(request, "web/placeholder.html", {"section": "nodes", "title": "Node"})
