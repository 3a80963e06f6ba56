"""Celery tasks: move experiments on."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from .models import Experiment, ExperimentState
from .services import advance_experiment


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
        advance_experiment(pk, now=timezone.now())
    return len(ids)
