"""A trial's job that ends moves its experiment on: at once (the event handler queues the
task) and, should that message be lost, at beat's next sweep."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from trainhub.events import JobStateChanged
from trainhub.experiments import handlers
from trainhub.experiments.models import TrialState
from trainhub.experiments.services import create_experiment
from trainhub.experiments.spec import parse_experiment
from trainhub.experiments.tasks import advance_all

from ..factories import make_job, spec
from .driver import end_run

pytestmark = pytest.mark.django_db

SEARCH = {
    "method": "random",
    "metric": "loss",
    "max_trials": 3,
    "max_concurrent": 1,
    "params": {"lr": {"type": "uniform", "low": 0.1, "high": 0.2}},
}


def test_only_a_trial_jobs_end_queues_its_experiment(alice: User, monkeypatch: Any) -> None:
    queued: list[int] = []
    monkeypatch.setattr(handlers.advance, "delay", queued.append)
    job_spec, search = parse_experiment({**spec(), "search": SEARCH}, user=alice)
    exp = create_experiment(user=alice, spec=job_spec, search=search, now=timezone.now())
    trial = exp.trials.get()
    plain = make_job(alice, name="plain")
    handlers.on_event(JobStateChanged(job_id=trial.job_id or 0, state="running"))
    handlers.on_event(JobStateChanged(job_id=plain.pk, state="succeeded"))
    assert queued == []
    handlers.on_event(JobStateChanged(job_id=trial.job_id or 0, state="failed"))
    assert queued == [exp.pk]


def test_beat_moves_every_unfinished_experiment_on(alice: User) -> None:
    job_spec, search = parse_experiment({**spec(), "search": SEARCH}, user=alice)
    exp = create_experiment(user=alice, spec=job_spec, search=search, now=timezone.now())
    trial = exp.trials.get()
    assert trial.job is not None
    end_run(trial.job, loss=0.5, epoch=1)
    assert advance_all() == 1
    trial.refresh_from_db()
    assert trial.state == TrialState.COMPLETED and trial.result_at() == {0: 0.5}
    assert exp.trials.count() == 2
