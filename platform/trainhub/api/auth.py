"""`POST /api/v1/auth/token/`: exchange a username and password for an API token."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from knox.settings import knox_settings
from rest_framework import serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from trainhub.tenancy.tokens import TokenNameError, issue_token, latest_expiry

from .serializers.accounts import token_name_field


class SignInSerializer(AuthTokenSerializer):
    """A username and password, and optionally the new token's name (the CLI names it
    after the machine). Without one the token is unnamed, as tokens were before names."""

    name = token_name_field(required=False)


class ObtainTokenView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"

    @extend_schema(
        request=SignInSerializer,
        responses={
            201: inline_serializer(
                "IssuedToken",
                {
                    "token": serializers.CharField(),
                    "expiry": serializers.DateTimeField(allow_null=True),
                    "name": serializers.CharField(allow_null=True),
                },
            )
        },
    )
    def post(self, request: Request) -> Response:
        serializer = SignInSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        # Knox's TOKEN_TTL, held to TRAINHUB_TOKEN_MAX_DAYS (None: that longest lifetime).
        now, ttl = timezone.now(), knox_settings.TOKEN_TTL
        expires_at = None if ttl is None else min(now + ttl, latest_expiry(now))
        # The name is checked against the user's others only once the password is right.
        try:
            issued = issue_token(
                user=serializer.validated_data["user"],
                expires_at=expires_at,
                name=serializer.validated_data.get("name"),
            )
        except TokenNameError as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from exc
        return Response(
            {"token": issued.secret, "expiry": issued.expiry, "name": issued.name},
            status=status.HTTP_201_CREATED,
        )
