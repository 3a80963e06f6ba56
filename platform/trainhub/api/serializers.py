"""Shapes of the user-facing API's resources."""

from __future__ import annotations

from rest_framework import serializers

from trainhub.jobs.models import Job, JobEvent, Task
from trainhub.nodes.models import Node
from trainhub.tenancy.models import Team


class TaskSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.hostname", allow_null=True, default=None)
    address = serializers.CharField(allow_null=True, read_only=True)

    class Meta:
        model = Task
        fields = [
            "id",
            "role",
            "index",
            "attempt",
            "state",
            "desired",
            "node",
            "address",
            "cpu",
            "memory_mb",
            "gpu_indices",
            "exit_code",
            "message",
            "started_at",
            "finished_at",
        ]


class JobSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    submitted_by: serializers.StringRelatedField = serializers.StringRelatedField()
    tasks = TaskSerializer(many=True, read_only=True)
    url = serializers.HyperlinkedIdentityField(view_name="job-detail")

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "name",
            "team",
            "priority",
            "state",
            "pending_reason",
            "message",
            "submitted_by",
            "created_at",
            "started_at",
            "finished_at",
            "cancel_requested_at",
            "spec",
            "tasks",
        ]
        read_only_fields = fields


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["time", "kind", "from_state", "to_state", "reason", "actor"]


class TeamSerializer(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["slug", "name", "created_at"]


class NodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = [
            "id",
            "hostname",
            "address",
            "cpus",
            "memory_mb",
            "gpus",
            "state",
            "enrolled_at",
            "last_seen",
            "usage",
        ]


class EnrollmentTokenRequestSerializer(serializers.Serializer):
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    max_uses = serializers.IntegerField(min_value=1, required=False, allow_null=True)


class IssuedEnrollmentTokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    token = serializers.CharField()
