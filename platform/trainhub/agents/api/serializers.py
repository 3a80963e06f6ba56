"""Shapes of the enrollment request and answer and of a credential renewal
(docs/protocol.md §1)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class GpuSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(min_value=0)
    model = serializers.CharField(max_length=200)
    memory_mb = serializers.IntegerField(min_value=0)
    uuid = serializers.CharField(max_length=200, required=False, allow_blank=True)


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


class EnrolledSerializer(serializers.Serializer[Any]):
    node_id = serializers.IntegerField()
    credential = serializers.CharField()
    credential_expires_at = serializers.DateTimeField()


class RenewedCredentialSerializer(serializers.Serializer[Any]):
    credential = serializers.CharField()
    credential_expires_at = serializers.DateTimeField()
