"""Personal API tokens."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from trainhub.strictjson import JsonTypedSerializer


class ApiTokenSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The token's first characters; names it in DELETE.")
    created = serializers.DateTimeField()
    expiry = serializers.DateTimeField(allow_null=True)
    current = serializers.BooleanField(help_text="Whether this request used this token.")


# Read from requests only: its schema component is "ApiTokenRequest", not "…RequestRequest".
@extend_schema_serializer(component_name="ApiToken")
class ApiTokenRequestSerializer(JsonTypedSerializer):
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When it stops working; at most TRAINHUB_TOKEN_MAX_DAYS days from now, "
        "and, for a request signed with a token, no later than that token expires "
        "(null or absent: that latest time).",
    )

    def validate_expires_at(self, value: datetime | None) -> datetime | None:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("Must be in the future.")
        return value


class IssuedApiTokenSerializer(serializers.Serializer):
    id = serializers.CharField()
    token = serializers.CharField(help_text="The secret; shown only this once.")
    expiry = serializers.DateTimeField()

    @staticmethod
    def document(key: str, token: str, expiry: datetime | None) -> dict[str, Any]:
        return {"id": key, "token": token, "expiry": expiry}
