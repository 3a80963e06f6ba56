"""`POST /api/v1/auth/token/`: exchange a username and password for an API token."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from knox.models import AuthToken
from knox.settings import knox_settings
from rest_framework import serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView


class ObtainTokenView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"

    @extend_schema(
        request=AuthTokenSerializer,
        responses={
            201: inline_serializer(
                "IssuedToken",
                {
                    "token": serializers.CharField(),
                    "expiry": serializers.DateTimeField(allow_null=True),
                },
            )
        },
    )
    def post(self, request: Request) -> Response:
        serializer = AuthTokenSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        instance, token = AuthToken.objects.create(
            serializer.validated_data["user"], knox_settings.TOKEN_TTL
        )
        return Response({"token": token, "expiry": instance.expiry}, status=status.HTTP_201_CREATED)
