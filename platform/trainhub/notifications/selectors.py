"""Read-side queries of notifications: a user's choices, the webhooks and deliveries a
page or the API lists."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Q, QuerySet

from trainhub.tenancy.models import Team

from .choices import DEFAULT_EVENTS, DeliveryStatus, NotifyEvent
from .conf import NO_EMAIL_BACKEND
from .models import Delivery, Subscription, Webhook

RECENT_DELIVERIES = 20


@dataclass(frozen=True)
class Choices:
    """What a user is told about (their own jobs), and whether by e-mail."""

    events: frozenset[NotifyEvent]
    email: bool


def choices_of(user: User) -> Choices:
    """The user's choices; `DEFAULT_EVENTS` by e-mail for one who never chose."""
    row = Subscription.objects.filter(user=user).first()
    if row is None:
        return Choices(events=DEFAULT_EVENTS, email=True)
    return Choices(events=frozenset(NotifyEvent(e) for e in row.events), email=row.email)


def email_available() -> bool:
    """Whether this server sends e-mail at all (`TRAINHUB_EMAIL_HOST`, or a backend)."""
    return bool(settings.EMAIL_BACKEND != NO_EMAIL_BACKEND)


def own_webhooks(user: User) -> QuerySet[Webhook]:
    return Webhook.objects.filter(user=user).order_by("id")


def team_webhooks(team: Team) -> QuerySet[Webhook]:
    return Webhook.objects.filter(team=team).order_by("id")


def account_deliveries(user: User) -> QuerySet[Delivery]:
    """The user's e-mails and their own webhooks' deliveries, newest first."""
    return (
        Delivery.objects.filter(Q(user=user) | Q(webhook__user=user))
        .select_related("webhook")
        .order_by("-id")
    )


def team_deliveries(team: Team) -> QuerySet[Delivery]:
    return Delivery.objects.filter(webhook__team=team).select_related("webhook").order_by("-id")


def due_delivery_ids(*, now: datetime, limit: int = 500) -> list[int]:
    """Pending deliveries whose next attempt is due (oldest first)."""
    due = Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now).order_by(
        "next_attempt_at"
    )
    return list(due.values_list("id", flat=True)[:limit])
