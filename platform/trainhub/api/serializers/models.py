"""Registered models (`trainhub.registry`): versions and the request that registers one."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from trainhub.registry.models import MODEL_NAME_HELP, MODEL_NAME_PATTERN, ModelVersion
from trainhub.strictjson import StrictSerializer


class ModelVersionSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug", read_only=True)
    job = serializers.IntegerField(source="job_id", read_only=True)
    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, default=None, read_only=True
    )
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "team",
            "name",
            "version",
            "job",
            "created_by",
            "created_at",
            "size",
            "digest",
            "manifest",
            "download_url",
        ]
        read_only_fields = fields

    def get_download_url(self, obj: ModelVersion) -> str:
        return f"/api/v1/models/{obj.pk}/download/"


# Read from requests only: its schema component is "ModelExportRequest".
@extend_schema_serializer(component_name="ModelExport")
class ModelExportRequestSerializer(StrictSerializer):
    name = serializers.RegexField(
        MODEL_NAME_PATTERN,
        max_length=63,
        help_text=f"The model's name in the job's team: {MODEL_NAME_HELP}",
        error_messages={"invalid": f"Enter a model name: {MODEL_NAME_HELP}"},
    )
