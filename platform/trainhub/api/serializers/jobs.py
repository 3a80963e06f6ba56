"""Jobs, their tasks and events."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from trainhub.jobs.models import Job, JobEvent, Task
from trainhub.strictjson import JsonTypedSerializer


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
            "borrowed",
            "exit_code",
            "message",
            "end_cause",
            "end_hint",
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
            "end_cause",
            "end_hint",
            "stalled_at",
            "submitted_by",
            "created_at",
            "started_at",
            "finished_at",
            "cancel_requested_at",
            "target_workers",
            "restarts",
            "infra_restarts",
            "preemptions",
            "spec",
            "tasks",
        ]
        read_only_fields = fields


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["time", "kind", "from_state", "to_state", "reason", "actor"]


# Read from requests only: its schema component is "ScaleRequest", not "…RequestRequest".
@extend_schema_serializer(component_name="Scale")
class ScaleRequestSerializer(JsonTypedSerializer):
    workers = serializers.IntegerField(
        min_value=1, max_value=1024, help_text="Workers to run, within the spec's min and max."
    )


# Read from requests only: its schema component is "CloneRequest", not "…RequestRequest".
@extend_schema_serializer(component_name="Clone")
class CloneRequestSerializer(JsonTypedSerializer):
    name = serializers.CharField(
        max_length=100,
        required=False,
        help_text="Name of the new job (default: the same).",
        error_messages={"blank": "Give the new job a name, or leave `name` out to keep this one."},
    )
