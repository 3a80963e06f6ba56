"""Teams, memberships and quotas."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .choices import Role


class TeamQuerySet(models.QuerySet["Team"]):
    def visible_to(self, user: object) -> TeamQuerySet:
        if getattr(user, "is_superuser", False):
            return self.all()
        return self.filter(memberships__user=user).distinct()


class Team(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="unique_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Quota(models.Model):
    """A team's nominal share of the cluster, per resource."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="quota")
    cpu = models.FloatField(default=0)
    memory_mb = models.PositiveBigIntegerField(default=0)
    gpu = models.PositiveIntegerField(default=0)
    # None: no limit on what the team may borrow / lend beyond its nominal quota.
    borrowing_limit_cpu = models.FloatField(null=True, blank=True)
    lending_limit_cpu = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"quota of {self.team}: cpu={self.cpu} mem={self.memory_mb}MiB gpu={self.gpu}"
