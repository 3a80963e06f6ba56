"""`/api/v1/tokens/`: a user's personal API tokens."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from knox.models import AuthToken
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from trainhub.tenancy.tokens import (
    TokenLifetimeError,
    TokenNameError,
    expiry_of,
    issue_token,
    name_of,
    revoke_token,
    tokens_of,
)

from ..serializers.accounts import (
    ApiTokenRequestSerializer,
    ApiTokenSerializer,
    IssuedApiTokenSerializer,
)
from .jobs import _user


class ApiTokenViewSet(viewsets.ViewSet):
    """Your API tokens: several at once, each with a name you choose (distinct among
    yours), stored hashed, each expiring (at most `TRAINHUB_TOKEN_MAX_DAYS` after it is
    made, and no later than the token that made it, if one did). A password change revokes
    them all.

    The secret is shown once, when the token is created.
    """

    throttle_scope = "auth"
    lookup_value_regex = r"[\w-]+"

    def get_throttles(self) -> list[Any]:
        return [ScopedRateThrottle()] if self.action == "create" else []

    @extend_schema(responses={200: ApiTokenSerializer(many=True)})
    def list(self, request: Request) -> Response:
        current = getattr(request.auth, "digest", None)
        tokens = tokens_of(_user(request)).order_by("created")
        return Response(
            ApiTokenSerializer(
                [
                    {
                        "id": t.token_key,
                        "name": name_of(t),
                        "created": t.created,
                        "expiry": t.expiry,
                        "current": t.digest == current,
                    }
                    for t in tokens
                ],
                many=True,
            ).data
        )

    @extend_schema(request=ApiTokenRequestSerializer, responses={201: IssuedApiTokenSerializer})
    def create(self, request: Request) -> Response:
        params = ApiTokenRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        # Signed with a token (not a session): the new one ends no later than it does.
        signing = request.auth if isinstance(request.auth, AuthToken) else None
        try:
            issued = issue_token(
                user=_user(request),
                expires_at=params.validated_data.get("expires_at"),
                not_after=expiry_of(signing) if signing is not None else None,
                name=params.validated_data["name"],
            )
        except (TokenLifetimeError, TokenNameError) as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from exc
        return Response(
            IssuedApiTokenSerializer.document(
                issued.key, issued.name, issued.secret, issued.expiry
            ),
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        parameters=[OpenApiParameter("id", str, OpenApiParameter.PATH)], responses={204: None}
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Revoke the token: it stops working at once."""
        if not revoke_token(user=_user(request), key=pk or ""):
            raise NotFound("You have no token with this id.")
        return Response(status=status.HTTP_204_NO_CONTENT)
