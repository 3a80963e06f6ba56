"""What job events mean for experiments (an `EVENT_HANDLERS` entry)."""

from __future__ import annotations

from django.db.models import Q

from trainhub.events import Event, JobStateChanged
from trainhub.jobs.choices import JOB_TERMINAL

from .models import Trial
from .tasks import advance


def on_event(event: Event) -> None:
    """A trial's job that ended moves its experiment on at once."""
    if not isinstance(event, JobStateChanged) or event.state not in JOB_TERMINAL:
        return
    experiment_id = (
        Trial.objects.filter(Q(job_id=event.job_id)).values_list("experiment_id", flat=True).first()
    )
    if experiment_id is not None:
        advance.delay(experiment_id)
