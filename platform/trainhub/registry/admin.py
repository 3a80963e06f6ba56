from django.contrib import admin

from trainhub.readonly_admin import ReadOnlyModelAdmin

from .models import ModelVersion


@admin.register(ModelVersion)
class ModelVersionAdmin(ReadOnlyModelAdmin):
    """Read-only: versions are registered by `registry.services.export_job_model`."""

    list_display = ("name", "version", "team", "job", "created_by", "created_at", "size")
    list_filter = ("team",)
    search_fields = ("name", "digest")
    readonly_fields = [f.name for f in ModelVersion._meta.fields]
