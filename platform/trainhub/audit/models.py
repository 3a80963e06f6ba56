"""The audit log: who changed what, when, and how it looked before and after."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    time = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Kept apart from the foreign key so the entry still says who after the user is deleted.
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64, help_text="e.g. quota.update, member.add")
    object_type = models.CharField(max_length=64, help_text="e.g. tenancy.quota")
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_repr}"
