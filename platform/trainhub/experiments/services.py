"""Running experiments: each trial run is a job; the searcher decides what runs next.

`advance_experiment` is the one place that moves an experiment on. It reads the trials'
jobs, records each finished run's metric at its rung, and carries out what the searcher
(`searchers.next_actions`) asks: start a trial, or promote one (a new job that continues
the trial's checkpoints with a larger budget). Celery runs it when a trial's job ends
(`handlers.on_event`) and every few seconds (beat), so a lost message costs a delay, not
a stuck experiment; a row lock makes concurrent runs take turns.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from trainhub.audit.services import record_change
from trainhub.jobs.choices import JOB_TERMINAL, JobState
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job
from trainhub.jobs.services.holds import hold_job, release_job
from trainhub.jobs.services.submission import cancel_job, check_submission, submit_job
from trainhub.jobs.services.transitions import JobStateError, PriorityCapExceeded
from trainhub.telemetry.finals import final_values
from trainhub.tenancy.policies import can_submit

from . import searchers
from .models import TRIAL_ENDED, Experiment, ExperimentState, Trial, TrialState
from .searchspec import SearchSpec

ACTOR = "experiment"
# The searcher's view of each trial state.
_SEARCHER_STATUS = {
    TrialState.RUNNING: searchers.RUNNING,
    TrialState.WAITING: searchers.WAITING,
    TrialState.COMPLETED: searchers.DONE,
    TrialState.STOPPED: searchers.DONE,
    TrialState.FAILED: searchers.FAILED,
    TrialState.CANCELLED: searchers.CANCELLED,
}


class ExperimentStateError(Exception):
    """The experiment is not in a state that allows the request."""


@transaction.atomic
def create_experiment(
    *, user: User, spec: JobSpec, search: SearchSpec, now: datetime
) -> Experiment:
    """Record an experiment from a validated job spec and search block and start its
    first trials."""
    from trainhub.tenancy.models import Team

    # Refused as its first trial would be (a priority cap without room: 409, or never: 400).
    check_submission(spec=_trial_spec_of(spec, search, search.max_budget and search.rungs()[0]))
    experiment = Experiment.objects.create(
        team=Team.objects.get(slug=spec.team),
        name=spec.name,
        submitted_by=user,
        priority=spec.priority,
        spec=spec.to_dict(),
        search=search.to_dict(),
        pending_reason="starting its first trials",
    )
    record_change(
        actor=user,
        action="experiment.create",
        target=experiment,
        before=None,
        after={"name": spec.name, "search": experiment.search},
        now=now,
    )
    advance_experiment(experiment.pk, now=now)
    experiment.refresh_from_db()
    return experiment


def _trial_spec_of(
    template: JobSpec,
    search: SearchSpec,
    budget: int | None,
    params: dict[str, Any] | None = None,
    number: int = 1,
) -> JobSpec:
    args: dict[str, Any] = {**template.args, **(params or {})}
    if search.max_budget is not None and budget is not None:
        args[search.budget_arg] = budget
    return dataclasses.replace(template, name=f"{template.name[:80]}-trial-{number}", args=args)


def _trial_spec(experiment: Experiment, trial: Trial, rung: int) -> JobSpec:
    search = experiment.search_spec
    return _trial_spec_of(
        JobSpec.from_dict(experiment.spec), search, search.rungs()[rung], trial.params, trial.number
    )


def _submit_run(experiment: Experiment, trial: Trial, rung: int, now: datetime) -> Job:
    budget = experiment.search_spec.rungs()[rung]
    reason = f"trial {trial.number} of experiment {experiment.pk}"
    if rung > 0:
        reason += f", promoted to rung {rung} (budget {budget}): continues its checkpoints"
    return submit_job(
        user=experiment.submitted_by,  # type: ignore[arg-type]
        spec=_trial_spec(experiment, trial, rung),
        now=now,
        reason=reason,
        checkpoints_of=trial.first_job,
        reclaim_first=True,
    )


def _metric(job: Job, name: str) -> float | None:
    for row in final_values([job.pk], [name]):
        final = row.finals[0]
        if final is not None and final.last is not None:
            return float(final.last)
    return None


def _finish_run(experiment: Experiment, trial: Trial, job: Job, now: datetime) -> None:
    """Record how the trial's latest run ended."""
    search = experiment.search_spec
    last_rung = len(search.rungs()) - 1
    if job.state == JobState.SUCCEEDED:
        value = _metric(job, search.metric)
        if value is None:
            trial.state, trial.finished_at = TrialState.FAILED, now
            trial.message = (
                f"its job {job.pk} succeeded without reporting '{search.metric}' (the "
                "experiment's metric): report it with ps_runtime.report"
            )
        else:
            results = trial.result_at()
            results[trial.rung] = value
            trial.results = {str(k): v for k, v in sorted(results.items())}
            best = [v for v in results.values()]
            trial.best_metric = min(best) if search.goal == "minimize" else max(best)
            budget = search.rungs()[trial.rung]
            if search.max_budget is None:
                budget = int(_metric(job, search.budget_metric) or 0)
            trial.budget_done = budget
            if trial.rung == last_rung:
                trial.state, trial.finished_at = TrialState.COMPLETED, now
            else:
                trial.state = TrialState.WAITING
                trial.message = f"completed rung {trial.rung} (budget {budget}); may be promoted"
    elif job.state == JobState.FAILED:
        trial.state, trial.finished_at = TrialState.FAILED, now
        trial.message = f"its job {job.pk} failed: {job.message}"
    else:
        trial.state, trial.finished_at = TrialState.CANCELLED, now
        trial.message = f"its job {job.pk} was cancelled"
    trial.save()


def _views(trials: list[Trial]) -> list[searchers.TrialView]:
    return [
        searchers.TrialView(t.number, _SEARCHER_STATUS[TrialState(t.state)], t.rung, t.result_at())
        for t in trials
    ]


@transaction.atomic
def advance_experiment(experiment_id: int, *, now: datetime) -> None:
    """Move the experiment on: record finished runs, start or promote trials, end it."""
    experiment = (
        Experiment.objects.select_for_update(of=("self",))
        .select_related("team", "submitted_by")
        .get(pk=experiment_id)
    )
    if experiment.ended:
        return
    search = experiment.search_spec
    trials = list(experiment.trials.select_related("job", "first_job"))
    for trial in trials:
        if trial.state == TrialState.RUNNING and trial.job and trial.job.state in JOB_TERMINAL:
            _finish_run(experiment, trial, trial.job, now)
    _record_best(experiment, trials)
    failed = [t for t in trials if t.state == TrialState.FAILED]
    if len(failed) > search.max_failed_trials:
        last = max(failed, key=lambda t: (t.finished_at or now, t.number))
        _end(
            experiment,
            trials,
            ExperimentState.FAILED,
            f"{len(failed)} trials failed, more than max_failed_trials "
            f"({search.max_failed_trials}); the last, trial {last.number}: {last.message}",
            now,
        )
        return
    if experiment.state == ExperimentState.RUNNING:
        submitter = experiment.submitted_by
        if submitter is None or not can_submit(submitter, experiment.team):
            who = submitter.username if submitter else "its submitter (deleted)"
            _end(
                experiment,
                trials,
                ExperimentState.FAILED,
                f"{who} can no longer submit jobs to team {experiment.team.slug} (removed, "
                "a viewer now, or the team is deactivated): no more trials start",
                now,
            )
            return
        experiment.pending_reason = ""
        _carry_out(experiment, trials, searchers.next_actions(search, _views(trials)), now)
        if experiment.ended:
            return
        if searchers.finished(search, _views(trials)):
            _end(experiment, trials, ExperimentState.SUCCEEDED, _summary(experiment), now)
            return
    experiment.pending_reason = _waiting_for(experiment, trials)
    experiment.save(update_fields=["pending_reason", "best_trial", "best_metric"])


def _carry_out(
    experiment: Experiment, trials: list[Trial], actions: list[searchers.Action], now: datetime
) -> None:
    by_number = {t.number: t for t in trials}
    for action in actions:
        try:
            with transaction.atomic():
                if isinstance(action, searchers.Start):
                    trial = Trial(experiment=experiment, number=action.number, params=action.params)
                    job = _submit_run(experiment, trial, 0, now)
                    trial.first_job = trial.job = job
                    trial.save()
                    trials.append(trial)
                else:
                    trial = by_number[action.number]
                    trial.job = _submit_run(experiment, trial, action.rung, now)
                    trial.rung, trial.state = action.rung, TrialState.RUNNING
                    trial.message = f"promoted to rung {action.rung}"
                    trial.save()
        except PriorityCapExceeded as exc:
            if exc.impossible:
                _end(experiment, trials, ExperimentState.FAILED, f"no trial can start: {exc}", now)
                return
            # Tried again at the next advance; the reason says what it waits for.
            experiment.pending_reason = f"the next trial waits: {exc}"
            return


def _record_best(experiment: Experiment, trials: list[Trial]) -> None:
    found = searchers.best(experiment.search_spec, _views(trials))
    if found is None:
        return
    number, _, value = found
    experiment.best_trial = next(t for t in trials if t.number == number)
    experiment.best_metric = value


def _summary(experiment: Experiment) -> str:
    if experiment.best_trial is None:
        return "no trial reported the metric"
    t = experiment.best_trial
    return (
        f"best {experiment.search_spec.metric} {experiment.best_metric:.6g}: trial {t.number} "
        f"({', '.join(f'{k}={v}' for k, v in t.params.items())})"
    )


def _waiting_for(experiment: Experiment, trials: list[Trial]) -> str:
    if experiment.state == ExperimentState.PAUSED:
        return "paused: its trials are held in the queue"
    if experiment.pending_reason.startswith("the next trial waits"):
        return experiment.pending_reason  # set by this advance (`_carry_out`)
    search = experiment.search_spec
    running = [t for t in trials if t.state == TrialState.RUNNING and t.job is not None]
    queued = [t for t in running if t.job and t.job.state == JobState.PENDING]
    if queued:
        first = min(queued, key=lambda t: t.job_id or 0)
        reason = first.job.pending_reason if first.job else ""
        return f"trial {first.number} waits: {reason or 'for the scheduler'}"[:300]
    return (
        f"{len(running)} of at most {search.max_concurrent} trials running; "
        f"{len(trials)} of {search.max_trials} started"
    )


def _end(
    experiment: Experiment,
    trials: list[Trial],
    state: ExperimentState,
    message: str,
    now: datetime,
) -> None:
    for trial in trials:
        if trial.state in TRIAL_ENDED:
            continue
        if trial.state == TrialState.WAITING and state == ExperimentState.SUCCEEDED:
            trial.state = TrialState.STOPPED
            trial.message = f"stopped early at rung {trial.rung}: not among the best to promote"
        else:
            trial.state = TrialState.CANCELLED
            trial.message = f"the experiment {state}"
            if trial.job is not None and trial.job.state not in JOB_TERMINAL:
                try:
                    cancel_job(job=trial.job, actor=ACTOR, now=now)
                except JobStateError:
                    pass  # it ended meanwhile
        trial.finished_at = now
        trial.save()
    experiment.state, experiment.message = state, message
    experiment.finished_at, experiment.pending_reason = now, ""
    experiment.save()


def _active_jobs(experiment: Experiment) -> list[Job]:
    return [
        t.job
        for t in experiment.trials.filter(state=TrialState.RUNNING).select_related("job")
        if t.job is not None and t.job.state not in JOB_TERMINAL
    ]


@transaction.atomic
def pause_experiment(*, experiment: Experiment, actor: str, now: datetime) -> Experiment:
    """Hold every running trial in the queue (a placed one checkpoints and stops first)."""
    locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
    if locked.state != ExperimentState.RUNNING:
        raise ExperimentStateError(
            f"Experiment {locked.pk} is {locked.state}; only a running one pauses."
        )
    for job in _active_jobs(locked):
        hold_job(job=job, reason=f"experiment {locked.pk} is paused", actor=actor, now=now)
    locked.state = ExperimentState.PAUSED
    locked.pending_reason = "paused: its trials are held in the queue"
    locked.save(update_fields=["state", "pending_reason"])
    return locked


@transaction.atomic
def resume_experiment(*, experiment: Experiment, actor: str, now: datetime) -> Experiment:
    """Release the held trials and let the search go on."""
    locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
    if locked.state != ExperimentState.PAUSED:
        raise ExperimentStateError(
            f"Experiment {locked.pk} is {locked.state}; only a paused one resumes."
        )
    for job in _active_jobs(locked):
        release_job(job=job, actor=actor, now=now)
    locked.state = ExperimentState.RUNNING
    locked.save(update_fields=["state"])
    advance_experiment(locked.pk, now=now)
    locked.refresh_from_db()
    return locked


@transaction.atomic
def cancel_experiment(*, experiment: Experiment, actor: str, now: datetime) -> Experiment:
    """Cancel every trial that has not ended and end the experiment."""
    locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
    if locked.ended:
        raise ExperimentStateError(f"Experiment {locked.pk} already {locked.state}.")
    trials = list(locked.trials.select_related("job"))
    _end(locked, trials, ExperimentState.CANCELLED, f"cancelled by {actor}", now)
    return locked
