from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import CycleRecord, Reservation


class _ReadOnly(admin.ModelAdmin):
    """Written by the scheduler only."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(CycleRecord)
class CycleRecordAdmin(_ReadOnly):
    list_display = ("ran_at", "policy", "observe_only", "summary")


@admin.register(Reservation)
class ReservationAdmin(_ReadOnly):
    list_display = ("job", "node", "cpu", "memory_mb", "gpu", "created_at")
