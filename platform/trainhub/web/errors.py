"""The answers to a refused, missing or failed request (`handler403`, `handler404`,
`handler500`): JSON `{"detail": …}` under `/api/` like every other API error, elsewhere a
page with the site's navigation that says what happened and where to go; and the log
filter that keeps a refused request to one line."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader

API_PREFIX = "/api/"

# Django's own wording is for people, but only PermissionDenied's message is ours: views
# raise it with the reason ("Only platform admins manage nodes."). Http404's may name a
# model ("No Job matches the given query."), so the 404 page never shows it.
FORBIDDEN = "You do not have permission to perform this action."


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """`handler403`: the reason the view gave, and where the user can go instead."""
    reason = str(exception or "") or FORBIDDEN
    if _is_api(request):
        return JsonResponse({"detail": reason}, status=403)
    return render(request, "web/403.html", {"reason": reason}, status=403)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """`handler404`: a missing page and another team's look the same (docs/design.md §2)."""
    if _is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return render(request, "web/404.html", {"path": request.path}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    """`handler500`: rendered without the request, so it makes no query (the database may
    be what failed) and shows no user's navigation."""
    if _is_api(request):
        return JsonResponse({"detail": "Server error."}, status=500)
    body: str
    try:
        body = loader.render_to_string("web/500.html")
    except Exception:  # an error page must not fail itself
        body = "<!doctype html><title>Server error · TrainHub</title><h1>Server error</h1>"
    return HttpResponse(body, status=500)


class OneLineClientErrors(logging.Filter):
    """Drops the traceback from `django.request`'s 4xx records.

    Django logs a PermissionDenied (and a bad request) with the exception attached, so each
    refused page wrote a traceback to the web log; a refusal is an answer, not a fault. The
    one line ("Forbidden (Permission denied): /whatif/") stays; 5xx keep their traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
