"""What the pages and the API read about experiments."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from trainhub.jobs.models import Job
from trainhub.telemetry.chunks import read_jobs

from .models import Experiment, Trial


def with_trials(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Each job with the trial it runs, if any, in the same query: `trial_number`,
    `trial_experiment_id` and `trial_experiment_name` (None for other jobs). A trial's
    runs are its first job and the jobs that continue its checkpoints."""
    trial = Trial.objects.filter(
        first_job_id=Coalesce(OuterRef("checkpoints_of_id"), OuterRef("pk"))
    )
    return jobs.annotate(
        trial_number=Subquery(trial.values("number")[:1]),
        trial_experiment_id=Subquery(trial.values("experiment_id")[:1]),
        trial_experiment_name=Subquery(trial.values("experiment__name")[:1]),
    )


def trial_curves(
    trials: list[Trial], metric: str, budget_metric: str
) -> dict[int, list[list[float]]]:
    """Each trial's metric against its budget over every run, by trial number: [[budget,
    value], ...]. A point with no budget reported at its step is left out (budget:
    steps puts it at its step). Two queries whatever the number of trials."""
    first_jobs = {t.first_job_id: t.number for t in trials if t.first_job_id is not None}
    runs = Job.objects.filter(Q(pk__in=first_jobs) | Q(checkpoints_of_id__in=first_jobs))
    number_of = {
        pk: first_jobs[owner or pk] for pk, owner in runs.values_list("pk", "checkpoints_of_id")
    }
    budget_at: dict[tuple[int, int], float] = {}
    values: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (job_id, name), columns in read_jobs(number_of, {metric, budget_metric}).items():
        points = zip(columns.steps.tolist(), columns.values.tolist(), strict=True)
        for step, value in points:
            if name == budget_metric:
                budget_at[(job_id, step)] = value
            if name == metric:
                values[job_id].append((step, value))
    curves: dict[int, list[list[float]]] = defaultdict(list)
    for job_id, reported in values.items():
        for step, value in reported:
            x = float(step) if budget_metric == "step" else budget_at.get((job_id, step))
            if x is not None:
                curves[number_of[job_id]].append([x, float(value)])
    return {number: sorted(points) for number, points in curves.items()}


def experiment_curves(experiment: Experiment) -> dict[str, Any]:
    """Every trial's curve, for the experiment page's chart."""
    search = experiment.search_spec
    trials = list(experiment.trials.all())
    curves = trial_curves(trials, search.metric, search.budget_metric)
    return {
        "metric": search.metric,
        "budget": search.budget,
        "goal": search.goal,
        "trials": [
            {
                "number": t.number,
                "state": t.state,
                "params": t.params,
                "points": curves.get(t.number, []),
            }
            for t in trials
        ],
    }
