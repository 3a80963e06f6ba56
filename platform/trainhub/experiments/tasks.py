"""Celery tasks: move experiments on."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from .models import Experiment, ExperimentState
from .services import advance_experiment

logger = logging.getLogger(__name__)


@shared_task(name="trainhub.experiments.tasks.advance", acks_late=True)
def advance(experiment_id: int) -> None:
    """Move one experiment on (a trial's job ended)."""
    advance_experiment(experiment_id, now=timezone.now())


@shared_task(name="trainhub.experiments.tasks.advance_all", acks_late=True)
def advance_all() -> int:
    """Move every unfinished experiment on (beat; covers a lost message). Returns how many."""
    ids = list(
        Experiment.objects.filter(
            state__in=[ExperimentState.RUNNING, ExperimentState.PAUSED]
        ).values_list("pk", flat=True)
    )
    for pk in ids:
        try:
            advance_experiment(pk, now=timezone.now())
        except Exception:  # one experiment's trouble must not stall the others
            logger.exception("experiment %s could not move on", pk)
    return len(ids)
