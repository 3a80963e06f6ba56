"""State changes for teams: every write goes through here."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from .choices import Role
from .models import Membership, Quota, Team


@transaction.atomic
def create_team(*, slug: str, name: str, cpu: float = 0, memory_mb: int = 0, gpu: int = 0) -> Team:
    team = Team.objects.create(slug=slug, name=name)
    Quota.objects.create(team=team, cpu=cpu, memory_mb=memory_mb, gpu=gpu)
    return team


@transaction.atomic
def add_member(*, team: Team, user: User, role: Role = Role.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(
        team=team, user=user, defaults={"role": role}
    )
    return membership


@transaction.atomic
def ensure_team(*, slug: str, name: str, cpu: float, memory_mb: int, gpu: int) -> Team:
    """Create the team with this quota, or set the quota of the existing one."""
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        return create_team(slug=slug, name=name, cpu=cpu, memory_mb=memory_mb, gpu=gpu)
    Quota.objects.update_or_create(
        team=team, defaults={"cpu": cpu, "memory_mb": memory_mb, "gpu": gpu}
    )
    return team
