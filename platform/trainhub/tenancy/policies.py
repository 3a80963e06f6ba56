"""Who may do what with teams, as `can_<verb>(user, obj)` functions.

Platform admins (superusers) may do everything. Within a team: viewers read, members
also submit and act on jobs, team admins also change the membership. Only platform admins
create and rename teams, change quotas and manage users.
"""

from __future__ import annotations

from typing import Any

from .choices import MEMBERSHIP_MANAGERS, SUBMITTERS
from .models import Membership, Team
from .selectors import role_in


def is_platform_admin(user: Any) -> bool:
    return bool(getattr(user, "is_active", False) and getattr(user, "is_superuser", False))


def can_view_team(user: Any, team: Team) -> bool:
    return is_platform_admin(user) or role_in(user, team) is not None


def can_submit(user: Any, team: Team) -> bool:
    """Also cancel, scale and clone; nobody does in a deactivated team."""
    if not team.is_active:
        return False
    return is_platform_admin(user) or role_in(user, team) in SUBMITTERS


def can_manage_members(user: Any, team: Team) -> bool:
    return is_platform_admin(user) or role_in(user, team) in MEMBERSHIP_MANAGERS


def can_change_quota(user: Any, team: Team) -> bool:
    return is_platform_admin(user)


def can_create_team(user: Any) -> bool:
    return is_platform_admin(user)


def can_rename_team(user: Any, team: Team) -> bool:
    """Also deactivate and reactivate it."""
    return is_platform_admin(user)


def can_manage_users(user: Any) -> bool:
    """Create users, change their e-mail and name, deactivate them."""
    return is_platform_admin(user)


def can_run_whatif(user: Any, changed_teams: set[str]) -> bool:
    """Platform admins may replay any change; a team admin may replay changes to the quotas
    of the teams they administer (and policy settings) only."""
    if is_platform_admin(user):
        return True
    if not getattr(user, "is_authenticated", False):
        return False
    administered = set(
        Membership.objects.filter(user=user, role__in=MEMBERSHIP_MANAGERS).values_list(
            "team__slug", flat=True
        )
    )
    return bool(administered) and changed_teams <= administered
