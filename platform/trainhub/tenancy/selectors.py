"""Read-side queries about teams."""

from __future__ import annotations

from typing import Any

from django.db.models import Sum

from .choices import Role
from .models import Membership, Quota, Team
from .resources import Resources


def role_in(user: Any, team: Team) -> Role | None:
    """The user's role in the team, or None when not a member."""
    if not getattr(user, "is_authenticated", False):
        return None
    roles = Membership.objects.filter(team=team, user=user).values_list("role", flat=True)
    # One row at most (team and user are unique together): unordered, so no join on users.
    role = next(iter(roles.order_by()[:1]), None)
    return Role(role) if role else None


def can_submit(user: Any, team: Team) -> bool:
    """Kept for callers of the first skeleton; see `policies.can_submit`."""
    from .policies import can_submit as policy

    return policy(user, team)


def quotas_in_all() -> Resources:
    """The nominal quotas of all teams added up (one query)."""
    sums = Quota.objects.aggregate(cpu=Sum("cpu"), memory_mb=Sum("memory_mb"), gpu=Sum("gpu"))
    return Resources(sums["cpu"] or 0.0, sums["memory_mb"] or 0, sums["gpu"] or 0)
