"""Teams, memberships, quotas, per-priority caps, and the names of personal API tokens."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.urls import reverse

from .choices import Priority, Role
from .resources import LimitResources, Resources


class TeamQuerySet(models.QuerySet["Team"]):
    def visible_to(self, user: Any) -> TeamQuerySet:
        if getattr(user, "is_superuser", False):
            return self.all()
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(memberships__user=user).distinct()


class Team(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    # A deactivated team takes no new jobs and has no quota (`services.set_team_active`).
    is_active = models.BooleanField(default=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def get_absolute_url(self) -> str:
        """The team's page (the admin's "View on site" leads back to it)."""
        return reverse("web-team-detail", args=[self.slug])


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        ordering = ["team_id", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="unique_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Quota(models.Model):
    """A team's nominal share of the cluster, and how far it may borrow and lend.

    Borrowing limits say how much beyond its nominal quota the team may use of other
    teams' idle quota; lending limits cap how much of its own idle nominal quota others may
    use. None means unlimited (borrow without limit / lend all that is idle).
    """

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="quota")
    cpu = models.FloatField(default=0)
    memory_mb = models.PositiveBigIntegerField(default=0)
    gpu = models.PositiveIntegerField(default=0)
    borrowing_limit_cpu = models.FloatField(null=True, blank=True)
    borrowing_limit_memory_mb = models.PositiveBigIntegerField(null=True, blank=True)
    borrowing_limit_gpu = models.PositiveIntegerField(null=True, blank=True)
    lending_limit_cpu = models.FloatField(null=True, blank=True)
    lending_limit_memory_mb = models.PositiveBigIntegerField(null=True, blank=True)
    lending_limit_gpu = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(cpu__gte=0), name="quota_cpu_not_negative"),
            models.CheckConstraint(
                condition=models.Q(borrowing_limit_cpu__isnull=True)
                | models.Q(borrowing_limit_cpu__gte=0),
                name="quota_borrowing_cpu_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(lending_limit_cpu__isnull=True)
                | models.Q(lending_limit_cpu__gte=0),
                name="quota_lending_cpu_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"quota of {self.team}: cpu={self.cpu:g} mem={self.memory_mb}MiB gpu={self.gpu}"

    @property
    def nominal(self) -> Resources:
        return Resources(self.cpu, self.memory_mb, self.gpu)

    @property
    def borrowing_limit(self) -> LimitResources:
        return LimitResources(
            self.borrowing_limit_cpu, self.borrowing_limit_memory_mb, self.borrowing_limit_gpu
        )

    @property
    def lending_limit(self) -> LimitResources:
        return LimitResources(
            self.lending_limit_cpu, self.lending_limit_memory_mb, self.lending_limit_gpu
        )


class PriorityCap(models.Model):
    """At most this much of a team's jobs may run at one priority (None: no cap)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="priority_caps")
    priority = models.CharField(max_length=16, choices=Priority.choices)
    cpu = models.FloatField(null=True, blank=True)
    memory_mb = models.PositiveBigIntegerField(null=True, blank=True)
    gpu = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["team_id", "priority"]
        constraints = [
            models.UniqueConstraint(fields=["team", "priority"], name="unique_priority_cap"),
            models.CheckConstraint(
                condition=models.Q(cpu__isnull=True) | models.Q(cpu__gte=0),
                name="priority_cap_cpu_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.priority} cap of {self.team}"

    @property
    def limit(self) -> LimitResources:
        return LimitResources(self.cpu, self.memory_mb, self.gpu)


TOKEN_NAME_MAX_LENGTH = 64


class TokenLabel(models.Model):
    """The name its owner gave a personal API token ("laptop CLI", "nightly script").

    Beside knox's `AuthToken`, which cannot take a field: one label per token, keyed by the
    token's digest and deleted with it. `user` repeats the token's owner so the database
    itself keeps one user's names distinct (ignoring case). Tokens made before names existed,
    or by a sign-in that gave none, have no label.
    """

    token = models.OneToOneField(
        "knox.AuthToken", on_delete=models.CASCADE, primary_key=True, related_name="label"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="token_labels"
    )
    name = models.CharField(max_length=TOKEN_NAME_MAX_LENGTH)

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("name"), "user", name="token_label_name_unique_per_user"),
        ]

    def __str__(self) -> str:
        return self.name
