"""What a user can be told about, through which channel, and where a delivery stands."""

from __future__ import annotations

from django.db import models


class NotifyEvent(models.TextChoices):
    """Events a user or a team webhook subscribes to (experiments do not exist yet)."""

    JOB_SUCCEEDED = "job.succeeded", "Job succeeded"
    JOB_FAILED = "job.failed", "Job failed (with its cause)"
    JOB_PREEMPTED = "job.preempted", "Job preempted"
    JOB_STALLED = "job.stalled", "Job stalled"


# What a user who never chose is told about (by e-mail, when the server sends e-mail).
DEFAULT_EVENTS = frozenset({NotifyEvent.JOB_FAILED, NotifyEvent.JOB_STALLED})


class Channel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (signed)"
    SLACK = "slack", 'Slack-compatible ({"text": …})'


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Gave up"


DELIVERY_OPEN = frozenset({DeliveryStatus.PENDING})
