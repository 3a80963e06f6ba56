"""Personal API tokens in `Authorization: Token <secret>` (knox), held to the maximum
lifetime: a token older than `TOKEN_MAX_DAYS` stops working whatever its own expiry says
(tokens made before the limit was set or lowered included)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed


class BoundedTokenAuthentication(TokenAuthentication):
    def validate_user(self, auth_token: Any) -> tuple[Any, Any]:
        if auth_token.created < timezone.now() - timedelta(days=settings.TOKEN_MAX_DAYS):
            auth_token.delete()
            raise AuthenticationFailed("Invalid token.")  # knox's words for an expired one
        return super().validate_user(auth_token)


class BoundedTokenScheme(KnoxTokenScheme):
    """The same scheme in the schema as knox's own."""

    target_class = "trainhub.api.token_auth.BoundedTokenAuthentication"
