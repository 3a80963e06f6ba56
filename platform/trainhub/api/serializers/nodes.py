"""Nodes and enrollment tokens."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import EnrollmentToken, Node


class NodeGpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    model = serializers.CharField(required=False)
    memory_mb = serializers.IntegerField(required=False)
    uuid = serializers.CharField(required=False)


class NodeSerializer(serializers.ModelSerializer):
    gpus = NodeGpuSerializer(many=True, read_only=True)
    usage = serializers.DictField(read_only=True)
    alive = serializers.SerializerMethodField()
    active_tasks = serializers.IntegerField(read_only=True, help_text="Tasks running there now.")
    drained = serializers.SerializerMethodField(
        help_text="Draining and nothing runs there any more: safe to take out of service."
    )

    owner: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="Team whose jobs prefer this node (set in the admin), or null.",
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "hostname",
            "address",
            "cpus",
            "memory_mb",
            "gpus",
            "owner",
            "state",
            "alive",
            "active_tasks",
            "drained",
            "enrolled_at",
            "last_seen",
            "usage",
        ]
        read_only_fields = fields

    def get_alive(self, node: Node) -> bool:
        return node.is_alive(timezone.now())

    def get_drained(self, node: Node) -> bool:
        return node.state == NodeState.DRAINING and not getattr(node, "active_tasks", 0)


class EnrollmentTokenSerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = EnrollmentToken
        fields = [
            "id",
            "description",
            "created_by",
            "created_at",
            "expires_at",
            "max_uses",
            "uses",
            "revoked",
        ]
        read_only_fields = fields


class EnrollmentTokenRequestSerializer(serializers.Serializer):
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    max_uses = serializers.IntegerField(
        min_value=1, max_value=1_000_000, required=False, allow_null=True
    )


class IssuedEnrollmentTokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    token = serializers.CharField(help_text="The secret; shown only this once.")
