"""The experiments admin: read-only, trials inline."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from trainhub.experiments.services import create_experiment
from trainhub.experiments.spec import parse_experiment

from ..factories import make_user, spec

pytestmark = pytest.mark.django_db


def test_platform_admins_read_experiments_and_their_trials(alice: User) -> None:
    search = {
        "method": "random",
        "metric": "loss",
        "max_trials": 2,
        "params": {"lr": {"type": "uniform", "low": 0.1, "high": 0.2}},
    }
    job_spec, search_spec = parse_experiment({**spec(), "search": search}, user=alice)
    exp = create_experiment(user=alice, spec=job_spec, search=search_spec, now=timezone.now())
    client = Client()
    client.force_login(make_user("root", superuser=True))
    assert "movielens-mf" in client.get("/admin/experiments/experiment/").content.decode()
    page = client.get(f"/admin/experiments/experiment/{exp.pk}/change/").content.decode()
    assert "trial 1 of experiment" in page and "Running" in page
    assert client.get("/admin/experiments/experiment/add/").status_code == 403
