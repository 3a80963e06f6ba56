"""Read-side queries about teams."""

from __future__ import annotations

from typing import Any

from .choices import SUBMITTERS, Role
from .models import Membership, Team


def role_in(user: Any, team: Team) -> Role | None:
    """The user's role in the team, or None when not a member."""
    if not getattr(user, "is_authenticated", False):
        return None
    role = Membership.objects.filter(team=team, user=user).values_list("role", flat=True).first()
    return Role(role) if role else None


def can_submit(user: Any, team: Team) -> bool:
    return bool(getattr(user, "is_superuser", False)) or role_in(user, team) in SUBMITTERS
