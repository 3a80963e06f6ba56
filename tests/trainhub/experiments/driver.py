"""Playing a trial job's part: its runs end with the metrics they report."""

from __future__ import annotations

from django.utils import timezone
from trainhub.experiments.models import Experiment, Trial, TrialState
from trainhub.experiments.services import advance_experiment
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.telemetry.services import write_points


def end_run(job: Job, state: JobState = JobState.SUCCEEDED, **metrics: float) -> None:
    """End `job` in `state` having reported `metrics` (name=value) at its last step."""
    now = timezone.now()
    step = 100 * int(metrics.get("epoch", 1))
    write_points(job.pk, [(name, step, value) for name, value in metrics.items()], time=now)
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=now, message="boom")


def running(experiment: Experiment) -> list[Trial]:
    return list(experiment.trials.filter(state=TrialState.RUNNING).order_by("number"))


def advance(experiment: Experiment) -> Experiment:
    advance_experiment(experiment.pk, now=timezone.now())
    experiment.refresh_from_db()
    return experiment
