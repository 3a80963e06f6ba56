"""The OpenAPI schema's operations, with every error answer each one can give.

drf-spectacular documents the answers a view names; the errors DRF and Django give on the
way there (a field at fault, no credentials, CSRF or a role, an unknown id, a body that is
not JSON, a rate limit) would otherwise be missing, and a client — or schemathesis — could
not tell a documented refusal from a broken server.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import get_lib_doc_excludes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import AllowAny, IsAuthenticated

from trainhub.strictjson import JsonTypedSerializer

from .errors import FIELD_ERRORS, error_response
from .token_auth import BoundedTokenAuthentication

NO_NUL = r"^[^\x00]*$"


def lib_doc_excludes() -> list[type]:
    """Base classes whose docstring no schema component inherits (SPECTACULAR_SETTINGS)."""
    return [*get_lib_doc_excludes(), JsonTypedSerializer]


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

UNAUTHENTICATED = error_response(
    "No credentials, or credentials that are not (or no longer) valid."
)
FORBIDDEN = error_response(
    "Signed in, but not allowed: the role is missing, or a session request lacks its CSRF token."
)
NOT_FOUND = error_response("No such object among those you can see (or no such path).")
UNSUPPORTED_MEDIA_TYPE = error_response("The body is not in a media type this operation takes.")
THROTTLED = error_response("Too many requests; `Retry-After` says when to try again.")


class ErrorDocumentingAutoSchema(AutoSchema):
    """AutoSchema that adds the 400, 401, 403, 404, 415 and 429 answers an operation can give,
    unless the view documents that code itself."""

    def get_operation(
        self, path: str, path_regex: str, path_prefix: str, method: str, registry: Any
    ) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses = operation["responses"]
        for code, response in self._error_responses(operation).items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code)
        return operation

    def _map_serializer(
        self, serializer: Any, direction: Any, bypass_extensions: bool = False
    ) -> Any:
        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        if direction == "request" and getattr(serializer, "refuses_unknown_fields", False):
            schema["additionalProperties"] = False
        return schema

    def _insert_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
        super()._insert_field_validators(field, schema)
        # DRF refuses NUL in every CharField; say so where no pattern says more already.
        if (
            isinstance(field, serializers.CharField)
            and schema.get("type") in ("string", ["string", "null"])
            and not {"pattern", "enum", "format", "oneOf"} & set(schema)
        ):
            schema["pattern"] = NO_NUL

    def _error_responses(self, operation: dict[str, Any]) -> dict[str, OpenApiResponse]:
        has_body = "requestBody" in operation
        has_query = any(p.get("in") == "query" for p in operation.get("parameters", []))
        permissions = self.view.get_permissions()
        authenticators = self.view.get_authenticators()
        errors: dict[str, OpenApiResponse] = {}
        if has_body or has_query:
            errors["400"] = FIELD_ERRORS
        if not all(isinstance(p, AllowAny) for p in permissions):
            errors["401"] = UNAUTHENTICATED
        signs_in_users = any(
            isinstance(a, (SessionAuthentication, BoundedTokenAuthentication))
            for a in authenticators
        )
        restricted = any(not isinstance(p, (AllowAny, IsAuthenticated)) for p in permissions)
        csrf = self.method in UNSAFE_METHODS and any(
            isinstance(a, SessionAuthentication) for a in authenticators
        )
        if signs_in_users and (restricted or csrf):
            errors["403"] = FORBIDDEN
        if "{" in self.path:
            errors["404"] = NOT_FOUND
        if has_body:
            errors["415"] = UNSUPPORTED_MEDIA_TYPE
        if self.view.get_throttles():
            errors["429"] = THROTTLED
        return errors
