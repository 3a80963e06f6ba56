"""State changes of notifications: a user's choices, webhooks, and deliveries — made when
an event happens (`record_occurrence`, once per event and endpoint) and attempted until
delivered or spent (`attempt_delivery`).

Delivery is at least once: an attempt is claimed by a conditional UPDATE that pushes the
delivery's `next_attempt_at` past the attempt's longest duration, so two workers never
send it at once, and a worker that dies mid-send leaves it due again for the beat sweep.
A receiver tells a repeat by `X-TrainHub-Delivery`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F

from trainhub.audit.services import Actor, record_change
from trainhub.jobs.models import Job
from trainhub.tenancy.models import Team
from trainhub.tenancy.policies import can_view_team

from .choices import Channel, DeliveryStatus, NotifyEvent, WebhookFormat
from .destinations import DestinationError, check_url
from .models import Delivery, Subscription, Webhook
from .payloads import email_message, event_payload, webhook_body, webhook_headers
from .selectors import choices_of, email_available, own_webhooks, team_webhooks
from .sending import ERROR_LENGTH, Outcome, post_webhook, send_email

logger = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 3600
EVENTS_REQUIRED = "Choose at least one event for a team's webhook."


class WebhookError(ValueError):
    """A webhook that cannot be saved as asked; `field` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@transaction.atomic
def set_choices(*, user: User, events: Iterable[NotifyEvent], email: bool) -> Subscription:
    """What the user is told about their own jobs, and whether by e-mail."""
    chosen = sorted({NotifyEvent(e).value for e in events})
    before = choices_of(user)
    row, _ = Subscription.objects.update_or_create(
        user=user, defaults={"events": chosen, "email": email}
    )
    record_change(
        actor=user,
        action="notifications.update",
        target=row,
        before={"events": sorted(before.events), "email": before.email},
        after={"events": chosen, "email": email},
    )
    return row


@dataclass(frozen=True)
class CreatedWebhook:
    webhook: Webhook
    secret: str  # shown once, to whoever made it


def _checked_url(url: str) -> str:
    try:
        return check_url(url, allow_private=settings.WEBHOOK_ALLOW_PRIVATE)
    except DestinationError as exc:
        raise WebhookError("url", str(exc)) from exc


def _checked_events(events: Iterable[str] | None, *, team: bool) -> list[str] | None:
    if events is None:
        if team:
            raise WebhookError("events", EVENTS_REQUIRED)
        return None
    chosen = sorted({NotifyEvent(e).value for e in events})
    if team and not chosen:
        raise WebhookError("events", EVENTS_REQUIRED)
    return chosen


def _audited(webhook: Webhook) -> dict[str, object]:
    """What the audit log keeps: the host, not the URL (a path may be a token)."""
    return {
        "host": urlsplit(webhook.url).hostname,
        "format": webhook.format,
        "events": webhook.events,
        "owner": f"team {webhook.team_id}" if webhook.team_id else f"user {webhook.user_id}",
    }


@transaction.atomic
def create_webhook(
    *,
    url: str,
    fmt: WebhookFormat = WebhookFormat.JSON,
    events: Iterable[str] | None = None,
    user: User | None = None,
    team: Team | None = None,
    actor: Actor = None,
) -> CreatedWebhook:
    """A user's own webhook (`user`) or a team's (`team`, with its `events`)."""
    if (user is None) == (team is None):
        raise ValueError("a webhook belongs to a user or to a team: give exactly one")
    secret = secrets.token_hex(32)
    webhook = Webhook.objects.create(
        user=user,
        team=team,
        url=_checked_url(url),
        format=WebhookFormat(fmt),
        events=_checked_events(events, team=team is not None),
        secret=secret,
        created_by=actor if isinstance(actor, User) else None,
    )
    record_change(
        actor=actor, action="webhook.create", target=webhook, before=None, after=_audited(webhook)
    )
    return CreatedWebhook(webhook=webhook, secret=secret)


_UNCHANGED: list[str] = []


@transaction.atomic
def update_webhook(
    webhook: Webhook,
    *,
    url: str | None = None,
    fmt: WebhookFormat | None = None,
    events: Iterable[str] | None = _UNCHANGED,
    actor: Actor = None,
) -> Webhook:
    """Change what is given (`events=None`: a user's own webhook follows their choices)."""
    before = _audited(webhook)
    if url is not None:
        webhook.url = _checked_url(url)
    if fmt is not None:
        webhook.format = WebhookFormat(fmt)
    if events is not _UNCHANGED:
        webhook.events = _checked_events(events, team=webhook.team_id is not None)
    webhook.save(update_fields=["url", "format", "events"])
    record_change(
        actor=actor, action="webhook.update", target=webhook, before=before, after=_audited(webhook)
    )
    return webhook


@transaction.atomic
def delete_webhook(webhook: Webhook, *, actor: Actor = None) -> None:
    """Delete it with its delivery log; pending deliveries to it are dropped."""
    record_change(
        actor=actor, action="webhook.delete", target=webhook, before=_audited(webhook), after=None
    )
    webhook.delete()


@dataclass(frozen=True)
class Occurrence:
    """An event that happened to a job, as notifications see it."""

    event: NotifyEvent
    job_id: int
    reason: str = ""


def occurrence_key(event: NotifyEvent, job: Job) -> str:
    """Names one occurrence: a job ends once, but is preempted (and may stall) once per
    run, so those count the job's preemptions (restarts)."""
    if event == NotifyEvent.JOB_PREEMPTED:
        ordinal = job.preemptions
    elif event == NotifyEvent.JOB_STALLED:
        ordinal = job.restarts + job.infra_restarts
    else:
        ordinal = 0
    return f"{event.value}:{job.pk}:{ordinal}"


def _deliveries(occurrence: Occurrence, job: Job, *, now: datetime) -> list[Delivery]:
    """One unsaved delivery per endpoint subscribed to the occurrence."""
    event = occurrence.event
    common = {
        "event": event.value,
        "key": occurrence_key(event, job),
        "job": job,
        "payload": event_payload(event, job, reason=occurrence.reason, now=now),
        "next_attempt_at": now,
        "created_at": now,
    }
    rows = []
    owner = job.submitted_by
    # The submitter, while they may still see the job (a member, or a platform admin).
    if owner is not None and owner.is_active and can_view_team(owner, job.team):
        choices = choices_of(owner)
        if event in choices.events and choices.email and owner.email and email_available():
            rows.append(Delivery(channel=Channel.EMAIL, user=owner, **common))
        for hook in own_webhooks(owner):
            if event in (choices.events if hook.events is None else hook.events):
                rows.append(Delivery(channel=Channel.WEBHOOK, webhook=hook, **common))
    for hook in team_webhooks(job.team):
        if event in (hook.events or ()):
            rows.append(Delivery(channel=Channel.WEBHOOK, webhook=hook, **common))
    return rows


def record_occurrence(occurrence: Occurrence, *, now: datetime) -> list[int]:
    """Make a delivery for every endpoint subscribed to it, once however often this is
    called for the same occurrence; returns the deliveries not yet attempted."""
    job = (
        Job.objects.select_related("team", "submitted_by")
        .defer("spec")
        .filter(pk=occurrence.job_id)
        .first()
    )
    if job is None:
        return []
    if occurrence.event == NotifyEvent.JOB_PREEMPTED and job.end_cause != "preempted":
        # Requeued to be placed elsewhere (a lost node, a failure at start): a restart that
        # the job's page and history tell, not a preemption.
        return []
    rows = _deliveries(occurrence, job, now=now)
    if not rows:
        return []
    with transaction.atomic():
        # The unique (key, endpoint) constraints make a repeat insert nothing.
        Delivery.objects.bulk_create(rows, ignore_conflicts=True)
    fresh = Delivery.objects.filter(key=rows[0].key, attempts=0, status=DeliveryStatus.PENDING)
    return list(fresh.values_list("id", flat=True))


def backoff(attempts: int) -> timedelta:
    """How long after its `attempts`-th failed attempt a delivery is tried again."""
    seconds = settings.NOTIFY_RETRY_SECONDS * 2 ** max(0, attempts - 1)
    return timedelta(seconds=min(seconds, MAX_BACKOFF_SECONDS))


def _lease() -> timedelta:
    """Longer than any attempt takes (a webhook name may have a few addresses to try)."""
    return timedelta(seconds=4 * settings.WEBHOOK_TIMEOUT_SECONDS + 60)


def attempt_delivery(delivery_id: int, *, now: datetime) -> DeliveryStatus | None:
    """Send the delivery if it is due and nobody else is sending it; its status after the
    attempt, or None when there was nothing to do."""
    claimed = Delivery.objects.filter(
        pk=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + _lease(), last_attempt_at=now)
    if not claimed:
        return None
    delivery = Delivery.objects.select_related("webhook", "user").get(pk=delivery_id)
    outcome = _send(delivery)
    return _record(delivery, outcome, now=now)


def _send(delivery: Delivery) -> Outcome:
    if delivery.channel == Channel.EMAIL:
        assert delivery.user is not None
        subject, text = email_message(delivery.payload)
        address = delivery.user.email if delivery.user.is_active else ""
        return send_email(address, subject, text)
    webhook = delivery.webhook
    assert webhook is not None, "a webhook delivery's webhook is deleted with it"
    timestamp = int(delivery.last_attempt_at.timestamp()) if delivery.last_attempt_at else 0
    body = webhook_body(
        delivery.payload, fmt=webhook.format, delivery_id=delivery.pk, timestamp=timestamp
    )
    headers = webhook_headers(
        secret=webhook.secret,
        body=body,
        event=delivery.event,
        delivery_id=delivery.pk,
        timestamp=timestamp,
    )
    return post_webhook(webhook.url, body, headers)


def _record(delivery: Delivery, outcome: Outcome, *, now: datetime) -> DeliveryStatus:
    if outcome.ok:
        status, next_at, delivered_at = DeliveryStatus.DELIVERED, None, now
    elif delivery.attempts >= settings.NOTIFY_ATTEMPTS:
        status, next_at, delivered_at = DeliveryStatus.FAILED, None, None
    else:
        status, next_at, delivered_at = (
            DeliveryStatus.PENDING,
            now + backoff(delivery.attempts),
            None,
        )
    # Only this attempt's claim is recorded over (a later claim, after the lease, wins).
    Delivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(
        status=status,
        next_attempt_at=next_at,
        delivered_at=delivered_at,
        last_status_code=outcome.status_code,
        last_error=outcome.error[:ERROR_LENGTH],
    )
    logger.info(
        "notification delivery %s (%s, %s) attempt %s: %s %s",
        delivery.pk,
        delivery.event,
        f"webhook {delivery.webhook_id}" if delivery.webhook_id else "e-mail",
        delivery.attempts,
        status,
        outcome.status_code or outcome.error,
    )
    return status
