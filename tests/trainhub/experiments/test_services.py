"""Experiments through their services: trials as jobs, promotions, limits, failures."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from trainhub.experiments.models import Experiment, ExperimentState, TrialState
from trainhub.experiments.services import (
    cancel_experiment,
    create_experiment,
    pause_experiment,
    resume_experiment,
)
from trainhub.experiments.spec import parse_experiment
from trainhub.jobs.choices import JOB_TERMINAL, JobState
from trainhub.jobs.models import Job
from trainhub.jobs.services import PriorityCapExceeded
from trainhub.tenancy.choices import Priority, Role
from trainhub.tenancy.models import Membership, PriorityCap, Team

from ..factories import spec
from .driver import advance, end_run, running

pytestmark = pytest.mark.django_db


def experiment(user: User, **search: Any) -> Experiment:
    body = {
        **spec(name="mf-search"),
        "search": {
            "method": "asha",
            "metric": "test_rmse",
            "max_trials": 9,
            "max_concurrent": 2,
            "max_budget": 9,
            "params": {
                "lr": {"type": "log_uniform", "low": 0.01, "high": 0.3},
                "dim": {"type": "categorical", "values": [8, 16, 32]},
            },
            **search,
        },
    }
    job_spec, search_spec = parse_experiment(body, user=user)
    return create_experiment(user=user, spec=job_spec, search=search_spec, now=timezone.now())


def active_jobs(exp: Experiment) -> int:
    return (
        Job.objects.filter(name__startswith=f"{exp.name}-trial-")
        .exclude(state__in=JOB_TERMINAL)
        .count()
    )


def test_trials_are_jobs_with_their_values_and_the_rung_budget(alice: User) -> None:
    exp = experiment(alice)
    first, second = running(exp)
    assert [first.number, second.number] == [1, 2]
    assert first.job is not None and first.job.reclaim_first
    args = first.job.job_spec.args
    assert args["epochs"] == 1  # the lowest rung
    assert args["lr"] == first.params["lr"] and args["dim"] == first.params["dim"]
    assert first.job.priority == exp.priority


def test_a_search_never_runs_more_than_max_concurrent(alice: User) -> None:
    exp = experiment(alice, max_concurrent=2)
    metric = iter([0.99, 0.97, 0.95, 0.93, 0.91, 0.89, 0.88, 0.87] * 10)
    most = 0
    while exp.state == ExperimentState.RUNNING:
        most = max(most, active_jobs(exp), len(running(exp)))
        trial = running(exp)[0]
        assert trial.job is not None
        epochs = trial.job.job_spec.args["epochs"]
        end_run(trial.job, test_rmse=next(metric), epoch=epochs)
        exp = advance(exp)
    assert most == 2
    assert exp.state == ExperimentState.SUCCEEDED
    assert exp.trials.count() == 9


def test_a_promoted_trial_continues_its_own_checkpoints_with_the_next_budget(
    alice: User,
) -> None:
    exp = experiment(alice, max_concurrent=1)
    for value in (0.90, 0.95, 0.99):  # trials 1, 2, 3 finish rung 0; trial 1 is best
        (trial,) = running(exp)
        assert trial.job is not None
        end_run(trial.job, test_rmse=value, epoch=1)
        exp = advance(exp)
    (promoted,) = running(exp)
    assert promoted.number == 1 and promoted.rung == 1
    assert promoted.job is not None and promoted.first_job is not None
    assert promoted.job != promoted.first_job
    assert promoted.job.checkpoints_of == promoted.first_job
    assert promoted.job.checkpoint_dir == promoted.first_job.checkpoint_dir
    assert promoted.job.job_spec.args["epochs"] == 3
    assert promoted.result_at() == {0: 0.90}


def test_failed_trials_do_not_stop_the_search_until_more_than_max_failed(alice: User) -> None:
    exp = experiment(alice, max_concurrent=1, max_failed_trials=2)
    for _ in range(2):
        (trial,) = running(exp)
        assert trial.job is not None
        end_run(trial.job, JobState.FAILED)
        exp = advance(exp)
        assert exp.state == ExperimentState.RUNNING
    (trial,) = running(exp)
    assert trial.job is not None
    end_run(trial.job, JobState.FAILED)
    exp = advance(exp)
    assert exp.state == ExperimentState.FAILED
    assert "3 trials failed, more than max_failed_trials (2)" in exp.message
    assert exp.trials.filter(state=TrialState.FAILED).count() == 3


def test_a_run_without_the_metric_fails_its_trial(alice: User) -> None:
    exp = experiment(alice, max_concurrent=1)
    (trial,) = running(exp)
    assert trial.job is not None
    end_run(trial.job, epoch=1)
    exp = advance(exp)
    trial.refresh_from_db()
    assert trial.state == TrialState.FAILED
    assert "without reporting 'test_rmse'" in trial.message


def test_pause_holds_the_trials_and_resume_releases_them(alice: User) -> None:
    exp = experiment(alice)
    jobs = [t.job for t in running(exp)]
    exp = pause_experiment(experiment=exp, actor="alice", now=timezone.now())
    assert exp.state == ExperimentState.PAUSED
    assert all(Job.objects.get(pk=j.pk).held for j in jobs if j)
    exp = resume_experiment(experiment=exp, actor="alice", now=timezone.now())
    assert exp.state == ExperimentState.RUNNING
    assert not any(Job.objects.get(pk=j.pk).held for j in jobs if j)


def test_cancel_ends_every_trial(alice: User) -> None:
    exp = experiment(alice)
    exp = cancel_experiment(experiment=exp, actor="alice", now=timezone.now())
    assert exp.state == ExperimentState.CANCELLED
    assert active_jobs(exp) == 0
    assert set(exp.trials.values_list("state", flat=True)) == {TrialState.CANCELLED}


def test_the_best_trial_and_the_early_stopped(alice: User) -> None:
    exp = experiment(alice, max_trials=3, max_concurrent=1, max_budget=3)
    values = iter([0.95, 0.90, 0.99, 0.85])
    while exp.state == ExperimentState.RUNNING:
        (trial,) = running(exp)
        assert trial.job is not None
        end_run(trial.job, test_rmse=next(values), epoch=trial.job.job_spec.args["epochs"])
        exp = advance(exp)
    assert exp.state == ExperimentState.SUCCEEDED
    assert exp.best_trial is not None and exp.best_trial.number == 2
    assert exp.best_metric == 0.85
    states = dict(exp.trials.values_list("number", "state"))
    assert states == {1: TrialState.STOPPED, 2: TrialState.COMPLETED, 3: TrialState.STOPPED}


def test_a_submitter_who_can_no_longer_submit_ends_the_experiment(alice: User) -> None:
    exp = experiment(alice, max_concurrent=1)
    (trial,) = running(exp)
    assert trial.job is not None
    Membership.objects.filter(user=alice).update(role=Role.VIEWER)
    end_run(trial.job, test_rmse=0.9, epoch=1)
    exp = advance(exp)
    assert exp.state == ExperimentState.FAILED
    assert "alice can no longer submit jobs to team recsys" in exp.message
    assert exp.trials.count() == 1  # nothing new was submitted in her name


def test_a_priority_cap_refuses_the_experiment_as_it_would_its_first_trial(alice: User) -> None:
    team = Team.objects.get(slug="recsys")
    cap = PriorityCap.objects.create(team=team, priority=Priority.NORMAL, cpu=1)
    with pytest.raises(PriorityCapExceeded) as refused:
        experiment(alice)  # a trial asks for 1.5 CPU
    assert refused.value.impossible and not Experiment.objects.exists()
    # Room for one trial: the second waits, and the experiment says so.
    cap.cpu = 2
    cap.save()
    exp = experiment(alice, max_concurrent=3)
    assert len(running(exp)) == 1
    assert exp.pending_reason.startswith("the next trial waits: ")
    # Room again: the reason goes once every trial is placed or queued.
    cap.delete()
    exp = advance(exp)
    assert len(running(exp)) == 3
    assert "waits" not in exp.pending_reason or exp.pending_reason.startswith("trial ")


def test_a_cap_lowered_below_one_trial_ends_the_experiment(alice: User) -> None:
    exp = experiment(alice, max_concurrent=1)
    (trial,) = running(exp)
    assert trial.job is not None
    team = Team.objects.get(slug="recsys")
    PriorityCap.objects.create(team=team, priority=Priority.NORMAL, cpu=1)
    end_run(trial.job, test_rmse=0.9, epoch=1)
    exp = advance(exp)
    assert exp.state == ExperimentState.FAILED
    assert exp.message.startswith("no trial can start: ")
