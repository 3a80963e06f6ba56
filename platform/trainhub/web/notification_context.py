"""What the notification sections of the account and team pages show: a user's choices,
webhooks and recent deliveries; a team's webhooks and deliveries (for its admins). A
fixed number of queries each, however many rows."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from trainhub.notifications.selectors import (
    RECENT_DELIVERIES,
    account_deliveries,
    choices_of,
    email_available,
    own_webhooks,
    team_deliveries,
    team_webhooks,
)
from trainhub.tenancy.models import Team

from .notification_forms import NotificationChoicesForm, TeamWebhookForm, WebhookForm


def account_notifications(user: User, **extra: Any) -> dict[str, Any]:
    choices = choices_of(user)
    context: dict[str, Any] = {
        "choices_form": NotificationChoicesForm(
            initial={"events": sorted(choices.events), "email": choices.email}
        ),
        "email_available": email_available(),
        "own_webhooks": list(own_webhooks(user)),
        "deliveries": list(account_deliveries(user)[:RECENT_DELIVERIES]),
        "webhook_form": WebhookForm(),
    }
    context.update(extra)
    return context


def team_notifications(team: Team, **extra: Any) -> dict[str, Any]:
    """For a team admin: the team's webhooks and their recent deliveries."""
    context: dict[str, Any] = {
        "team_webhooks": list(team_webhooks(team)),
        "team_deliveries": list(team_deliveries(team)[:RECENT_DELIVERIES]),
        "team_webhook_form": TeamWebhookForm(),
    }
    context.update(extra)
    return context
