"""Shapes of the enrollment request and answer and of a credential renewal
(docs/protocol.md §1)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ps_runtime.version import MAX_VERSION_LENGTH, check_version


class GpuSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(min_value=0)
    model = serializers.CharField(max_length=200)
    memory_mb = serializers.IntegerField(min_value=0)
    uuid = serializers.CharField(max_length=200, required=False, allow_blank=True)


class AgentVersionField(serializers.CharField):
    """The runtime version an agent reports: a string (no number turned into one) that
    `ps_runtime.version.check_version` accepts, as in the agent's heartbeats."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_VERSION_LENGTH)
        kwargs.setdefault("help_text", "The trainhub-runtime version the agent runs.")
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string, a version such as 0.1.0.")
        try:
            return check_version(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class EnrollSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(max_length=200, write_only=True)
    hostname = serializers.CharField(max_length=255)
    address = serializers.CharField(max_length=255)
    cpus = serializers.FloatField(min_value=0.1)
    memory_mb = serializers.IntegerField(min_value=1)
    gpus = GpuSerializer(many=True, required=False, default=list)
    labels = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=63),
        required=False,
        default=dict,
        help_text="Node labels, e.g. zone: eu-1 (ps_runtime.agent.labels says what is allowed).",
    )
    # Left out by agents older than the field.
    agent_version = AgentVersionField(required=False)


class EnrolledSerializer(serializers.Serializer[Any]):
    node_id = serializers.IntegerField()
    credential = serializers.CharField()
    credential_expires_at = serializers.DateTimeField()


class RenewedCredentialSerializer(serializers.Serializer[Any]):
    credential = serializers.CharField()
    credential_expires_at = serializers.DateTimeField()
