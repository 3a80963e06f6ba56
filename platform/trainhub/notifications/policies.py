"""Who may change which webhooks, as `can_<verb>(user, obj)` functions."""

from __future__ import annotations

from typing import Any

from trainhub.tenancy.models import Team
from trainhub.tenancy.policies import can_manage_members

from .models import Webhook


def can_manage_team_webhooks(user: Any, team: Team) -> bool:
    """Team admins (and platform admins) set a team's webhooks."""
    return can_manage_members(user, team)


def can_manage_webhook(user: Any, webhook: Webhook) -> bool:
    """A user's own webhook is theirs alone; a team's, its admins'."""
    if webhook.user_id is not None:
        return bool(getattr(user, "pk", None) == webhook.user_id)
    assert webhook.team is not None
    return can_manage_team_webhooks(user, webhook.team)
