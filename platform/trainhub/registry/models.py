"""Registered models: versions of a team's named model, each exported from one job."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from trainhub.jobs.models import Job
from trainhub.tenancy.models import Team

# Lowercase letters, digits, `-` and `_`, starting with a letter or digit: safe in paths.
MODEL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}\Z"
MODEL_NAME_HELP = (
    "1 to 63 lowercase letters, digits, '-' or '_', starting with a letter or a digit."
)
validate_model_name = RegexValidator(
    MODEL_NAME_PATTERN, f"Enter a model name: {MODEL_NAME_HELP}", code="invalid"
)


class ModelVersionQuerySet(models.QuerySet["ModelVersion"]):
    def visible_to(self, user: Any) -> ModelVersionQuerySet:
        """Versions of the user's teams (platform admins: all)."""
        if getattr(user, "is_superuser", False):
            return self.all()
        return self.filter(team__memberships__user=user)


class ModelVersion(models.Model):
    """One export of a job's newest committed checkpoint, numbered 1, 2, … per team and
    name; the zip under `MODEL_ROOT` never changes once registered."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="model_versions")
    name = models.CharField(max_length=63, validators=[validate_model_name])
    version = models.PositiveIntegerField()
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="model_versions")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()
    manifest = models.JSONField(help_text="The export's manifest.json.")
    size = models.PositiveBigIntegerField(help_text="Bytes of the zip.")
    digest = models.CharField(max_length=71, help_text="sha256:<hex> of the zip.")
    path = models.CharField(max_length=500, help_text="The zip, relative to MODEL_ROOT.")

    objects = ModelVersionQuerySet.as_manager()

    class Meta:
        ordering = ["team_id", "name", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name", "version"], name="registry_one_version_per_number"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"
