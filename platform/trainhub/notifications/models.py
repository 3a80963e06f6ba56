"""A user's notification choices, webhooks (a user's own or a team's), and one delivery
per (event, endpoint) with its attempts."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from trainhub.jobs.models import Job
from trainhub.tenancy.choices import MEMBERSHIP_MANAGERS
from trainhub.tenancy.models import Team

from .choices import Channel, DeliveryStatus, NotifyEvent, WebhookFormat


class Subscription(models.Model):
    """What a user is told about their own jobs, through e-mail and their own webhooks.
    A user without one has `DEFAULT_EVENTS` by e-mail (`selectors.choices_of`)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_choices"
    )
    events = models.JSONField(default=list, help_text="NotifyEvent values.")
    email = models.BooleanField(default=True, help_text="Send them to the user's e-mail.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"notifications of user {self.user_id}"


class WebhookQuerySet(models.QuerySet["Webhook"]):
    def manageable_by(self, user: Any) -> WebhookQuerySet:
        """The user's own webhooks and those of the teams they administer (platform
        admins: every team's); never another user's own."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        teams = Q(team__isnull=False)
        if not (user.is_active and user.is_superuser):
            teams &= Q(
                team__memberships__user=user, team__memberships__role__in=MEMBERSHIP_MANAGERS
            )
        return self.filter(Q(user=user) | teams)


class Webhook(models.Model):
    """A URL that gets a signed JSON POST for each event it is subscribed to: a user's own
    (on their jobs, for the events they chose unless `events` says otherwise) or a team's
    (on every job of the team, for `events`)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhooks",
    )
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks"
    )
    url = models.CharField(max_length=2000)
    format = models.CharField(
        max_length=8, choices=WebhookFormat.choices, default=WebhookFormat.JSON
    )
    events = models.JSONField(
        null=True,
        blank=True,
        help_text="NotifyEvent values; null on a user's own: the user's choices.",
    )
    # The HMAC key of X-TrainHub-Signature: shown once when made, never logged.
    secret = models.CharField(max_length=64, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WebhookQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, team__isnull=True)
                | Q(user__isnull=True, team__isnull=False),
                name="notifications_webhook_one_owner",
            )
        ]

    def __str__(self) -> str:  # neither the secret nor the URL (a path may be a token)
        return f"webhook {self.pk}"


class Delivery(models.Model):
    """One event for one endpoint (an e-mail address or a webhook), sent until it is
    delivered or its attempts are spent; `key` names the event's occurrence, so handling
    an event twice makes no second delivery."""

    event = models.CharField(max_length=32, choices=NotifyEvent.choices)
    key = models.CharField(max_length=100, help_text="event:job:occurrence")
    job = models.ForeignKey(Job, null=True, on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=8, choices=Channel.choices)
    webhook = models.ForeignKey(
        Webhook, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_deliveries",
        help_text="The e-mail's recipient.",
    )
    payload = models.JSONField(help_text="The event as it was when it happened.")
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    # Due then (a claimed attempt pushes it past its timeout: a worker that dies
    # mid-send leaves it due again); null once delivered or given up.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["key", "webhook"],
                condition=Q(webhook__isnull=False),
                name="notifications_one_delivery_per_webhook",
            ),
            models.UniqueConstraint(
                fields=["key", "user"],
                condition=Q(channel=Channel.EMAIL),
                name="notifications_one_email_per_user",
            ),
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} delivery {self.pk}"
