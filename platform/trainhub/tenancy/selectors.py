"""Read-side queries about teams."""

from __future__ import annotations

from typing import Any

from .choices import Role
from .models import Membership, Team


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
