from django.contrib import admin

from .models import EnrollmentToken, Node


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("hostname", "address", "cpus", "memory_mb", "state", "last_seen")
    readonly_fields = ("credential_hash", "enrolled_at", "last_seen", "usage")


@admin.register(EnrollmentToken)
class EnrollmentTokenAdmin(admin.ModelAdmin):
    list_display = ("description", "created_at", "expires_at", "uses", "max_uses", "revoked")
    readonly_fields = ("token_hash", "uses")
