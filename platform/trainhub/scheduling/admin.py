from django.contrib import admin

from trainhub.readonly_admin import ReadOnlyModelAdmin

from .models import CycleRecord, Reservation


@admin.register(CycleRecord)
class CycleRecordAdmin(ReadOnlyModelAdmin):
    """Written by the scheduler: the last cycle's policy, mode and decision counts."""

    list_display = ("ran_at", "policy", "observe_only", "summary")


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyModelAdmin):
    """Capacity the scheduler holds for pending jobs it freed room for."""

    list_display = ("job", "node", "cpu", "memory_mb", "gpu", "created_at")
