"""Personal API tokens."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.validators import RegexValidator
from django.utils import timezone
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from trainhub.strictjson import JsonTypedSerializer
from trainhub.tenancy.models import TOKEN_NAME_MAX_LENGTH
from trainhub.tenancy.tokens import NAME_REQUIRED, NAME_TOO_LONG


def token_name_field(*, required: bool) -> serializers.CharField:
    """A token's name as a request gives it: stripped, not blank, at most
    `TOKEN_NAME_MAX_LENGTH` characters (`issue_token` also refuses one already taken)."""
    return serializers.CharField(
        required=required,
        max_length=TOKEN_NAME_MAX_LENGTH,
        # In the schema too: a name has a character other than white space.
        validators=[RegexValidator(r"\S", message=NAME_REQUIRED)],
        error_messages={
            "required": NAME_REQUIRED,
            "blank": NAME_REQUIRED,
            "max_length": NAME_TOO_LONG,
        },
        help_text="What uses the token, e.g. “laptop CLI”: distinct among your tokens "
        f"(ignoring case), at most {TOKEN_NAME_MAX_LENGTH} characters once stripped, no "
        "control characters.",
    )


class ApiTokenSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The token's first characters; names it in DELETE.")
    name = serializers.CharField(
        allow_null=True, help_text="What its owner calls it; null for a token made without one."
    )
    created = serializers.DateTimeField()
    expiry = serializers.DateTimeField(allow_null=True)
    current = serializers.BooleanField(help_text="Whether this request used this token.")


# Read from requests only: its schema component is "ApiTokenRequest", not "…RequestRequest".
@extend_schema_serializer(component_name="ApiToken")
class ApiTokenRequestSerializer(JsonTypedSerializer):
    name = token_name_field(required=True)
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
    name = serializers.CharField()
    token = serializers.CharField(help_text="The secret; shown only this once.")
    expiry = serializers.DateTimeField()

    @staticmethod
    def document(key: str, name: str | None, token: str, expiry: datetime | None) -> dict[str, Any]:
        return {"id": key, "name": name, "token": token, "expiry": expiry}
