from django.contrib import admin

from trainhub.readonly_admin import ReadOnlyModelAdmin

from .models import Experiment, Trial


class TrialInline(admin.TabularInline):
    model = Trial
    extra = 0
    can_delete = False
    fields = ("number", "params", "state", "rung", "results", "best_metric", "job", "message")
    readonly_fields = fields

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Experiment)
class ExperimentAdmin(ReadOnlyModelAdmin):
    """Read-only: experiments change through their services (pause, resume, cancel)."""

    list_display = ("name", "team", "state", "best_metric", "submitted_by", "created_at")
    list_filter = ("state", "team")
    search_fields = ("name",)
    readonly_fields = [f.name for f in Experiment._meta.fields]
    inlines = [TrialInline]
