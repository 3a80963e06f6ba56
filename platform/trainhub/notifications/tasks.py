"""Celery entry points of notifications: one attempt of one delivery, and the beat sweep
that sends every delivery that is due (first attempts whose message was lost, retries
after their backoff, attempts of a worker that died mid-send)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from .selectors import due_delivery_ids
from .services import attempt_delivery


@shared_task(name="trainhub.notifications.tasks.send_delivery", acks_late=True)
def send_delivery(delivery_id: int) -> str | None:
    """One attempt, if the delivery is due and nobody else is sending it (idempotent)."""
    status = attempt_delivery(delivery_id, now=timezone.now())
    return None if status is None else str(status)


@shared_task(name="trainhub.notifications.tasks.sweep_deliveries", acks_late=True)
def sweep_deliveries() -> int:
    """Queue every due delivery; how many."""
    due = due_delivery_ids(now=timezone.now())
    queue_deliveries(due)
    return len(due)


def queue_deliveries(delivery_ids: list[int]) -> None:
    """Queue an attempt of each for a worker; without a broker (unit tests) nothing is
    queued and the deliveries stay due."""
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        return
    for delivery_id in delivery_ids:
        send_delivery.delay(delivery_id)
