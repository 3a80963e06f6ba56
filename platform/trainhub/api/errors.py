"""The API's error answers: their bodies as the schema documents them, and 409 Conflict.
The JSON 403/404/500 for paths under `/api/` that no API view answers are
`trainhub.web.errors`'s handlers."""

from __future__ import annotations

from typing import Any

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
