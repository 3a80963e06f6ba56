"""Full pages and htmx fragments from one view (as NetBox does): a request that htmx sends
to refresh part of a page gets just that part's template, everything else the page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def is_fragment_request(request: HttpRequest) -> bool:
    """True for an htmx request that swaps part of the page (not a boosted navigation)."""
    return (
        request.headers.get("HX-Request") == "true" and request.headers.get("HX-Boosted") != "true"
    )


def render_page(
    request: HttpRequest,
    page: str,
    fragment: str,
    context: Mapping[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    """Render `fragment` for htmx requests and `page` (which includes it) otherwise."""
    template = fragment if is_fragment_request(request) else page
    return render(request, template, dict(context), status=status)
