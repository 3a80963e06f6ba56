from django.contrib import admin

from trainhub.readonly_admin import ReadOnlyModelAdmin

from .models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyModelAdmin):
    """Read-only: entries are written by the services that make the changes."""

    list_display = ("time", "actor_name", "action", "object_type", "object_repr")
    list_filter = ("action", "object_type")
    search_fields = ("actor_name", "object_repr", "action")
    date_hierarchy = "time"
    readonly_fields = [f.name for f in AuditEntry._meta.fields]
