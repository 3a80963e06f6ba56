"""Celery entry points of telemetry."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from .retention import purge_expired
from .stallcheck import check_stalls


@shared_task(name="trainhub.telemetry.tasks.purge_expired_telemetry", acks_late=True)
def purge_expired_telemetry() -> dict[str, int]:
    """Apply retention (`retention.purge_expired`); idempotent, so a rerun is harmless."""
    purged = purge_expired(now=timezone.now())
    return {"jobs": purged.jobs, "points": purged.points, "lines": purged.lines}


@shared_task(name="trainhub.telemetry.tasks.check_stalls", acks_late=True)
def check_stalled_jobs() -> dict[str, int]:
    """Stall detection (`stallcheck.check_stalls`), every 10 s; a rerun is harmless."""
    done = check_stalls(now=timezone.now())
    return {"judged": done.judged, "stalled": done.stalled, "acted": done.acted}
