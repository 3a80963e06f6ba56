"""The API's error answers: their bodies as the schema documents them, 409 Conflict, and a
JSON 404 for every unknown path under `/api/`."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import APIException

# {"detail": "..."}: every error that is not about a field of the request.
ErrorResponse = inline_serializer("Error", {"detail": serializers.CharField()})

# DRF's validation errors: each field at fault (dotted into nested objects, indexed in
# lists) with its messages; `non_field_errors` for the request as a whole; `detail` when the
# body could not be parsed at all.
FIELD_ERRORS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Each field at fault with its messages: {field: [message]}, nested as "
    "the request is; `detail` when the body is not JSON.",
    "additionalProperties": {
        "anyOf": [
            {"type": "array", "items": {}},
            {"type": "object"},
            {"type": "string"},
        ]
    },
}


def error_response(description: str) -> OpenApiResponse:
    """A documented `{"detail": …}` answer."""
    return OpenApiResponse(ErrorResponse, description=description)


FIELD_ERRORS = OpenApiResponse(
    FIELD_ERRORS_SCHEMA, description="The request is invalid; nothing changed."
)


class Conflict(APIException):
    """409: the request is well-formed but conflicts with the current state (a name taken,
    the last admin of a team, a job's bounds, a quota below what running jobs hold)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """`handler404`: JSON under `/api/` (like every other API error), the page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    return page_not_found(request, exception or Exception("Not found"))
