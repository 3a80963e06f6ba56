"""Celery entry points of the scheduler."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from trainhub.jobs.services import release_due_restarts

from .services import run_cycle


@shared_task(name="trainhub.scheduling.tasks.run_scheduling_cycle", acks_late=True)
def run_scheduling_cycle() -> dict[str, int | bool]:
    """Run one scheduling cycle; idempotent, so a retried or duplicate run is harmless."""
    from .triggers import cycle_started  # triggers queues this task: imported late

    cycle_started()  # requests from now on queue the next cycle (at most one waits)
    result = run_cycle(now=timezone.now())
    return {"ran": result.ran, "started": result.started, "pending": result.pending}


@shared_task(name="trainhub.scheduling.tasks.release_restarts", acks_late=True)
def release_restarts() -> int:
    """Let the agents start restarts whose backoff is over (every cycle does it too)."""
    return release_due_restarts(timezone.now())
