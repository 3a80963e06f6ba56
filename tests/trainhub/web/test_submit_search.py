"""`/jobs/new/`'s search section: ticked, the page's job (either tab) and the search block
are submitted as an experiment, validated as `POST /api/v1/experiments/` validates them;
each error shows beside the field its path names, nothing is created and what was typed
stays. Unticked, the section is ignored and a job is submitted as before."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from trainhub.experiments.models import Experiment
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..event_capture import HANDLER
from ..factories import make_team, make_user, spec
from .test_submit import _field_error, _form, _yaml

pytestmark = pytest.mark.django_db

PARAMS = "lr: {type: log_uniform, low: 0.01, high: 0.3}\ndim: {type: categorical, values: [8, 16]}"


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    settings.EVENT_HANDLERS = [HANDLER]


@pytest.fixture
def alice() -> User:
    user = make_user("alice")
    make_team("recsys", members={user: Role.MEMBER}, cpu=8, memory_mb=16384)
    return user


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _search(**overrides: str | None) -> dict[str, str]:
    fields: dict[str, str | None] = {
        "experiment": "on",
        "search.method": "asha",
        "search.metric": "test_rmse",
        "search.goal": "minimize",
        "search.max_trials": "4",
        "search.max_concurrent": "2",
        "search.max_budget": "3",
        "search.params": PARAMS,
    }
    fields.update(overrides)
    return {k: v for k, v in fields.items() if v is not None}


def _section_errors(page: str) -> str:
    found = re.search(r'<div class="form-errors" role="alert" id="search-errors">(.*?)</div>', page)
    assert found, "no errors on top of the search section"
    return html.unescape(found.group(1))


def test_the_section_starts_unticked_and_ticked_with_search_1(alice: User) -> None:
    client = _client(alice)
    page = client.get("/jobs/new/").content.decode()
    assert "<legend>Hyperparameter search</legend>" in page
    assert re.search(r'<input type="checkbox" name="experiment"[^>]*id="id_experiment">', page)
    assert ">Submit job</button>" in page
    assert '<label for="id_search.params">Parameters (YAML)</label>' in page
    ticked = client.get("/jobs/new/?search=1").content.decode()
    assert re.search(r'<input type="checkbox" name="experiment"[^>]*checked>', ticked)
    assert ">Submit experiment</button>" in ticked


def test_the_form_and_the_search_submit_an_experiment(alice: User) -> None:
    answer = _client(alice).post("/jobs/new/", {**_form(name="mf-search"), **_search()})
    experiment = Experiment.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == f"/experiments/{experiment.pk}/"
    assert experiment.name == "mf-search" and experiment.submitted_by == alice
    assert experiment.search["method"] == "asha" and experiment.search["max_budget"] == 3
    assert set(experiment.search["params"]) == {"lr", "dim"}
    assert experiment.trials.count() == 2  # max_concurrent
    trial = experiment.trials.get(number=1)
    assert trial.job is not None
    assert trial.job.job_spec.args["epochs"] == 1  # the first rung's budget
    assert trial.job.job_spec.args["dim"] == trial.params["dim"]


def test_the_yaml_tab_and_the_search_submit_an_experiment(alice: User) -> None:
    document = spec(name="yaml-search", args={"epochs": 1})
    answer = _client(alice).post("/jobs/new/", {**_yaml(document), **_search()})
    assert answer.status_code == 302
    assert Experiment.objects.get().name == "yaml-search"


def test_search_errors_show_beside_their_fields_and_nothing_is_created(alice: User) -> None:
    bad_params = "lr: {type: log_uniform, high: 0.3}\ndim: {type: categorical, values: []}"
    answer = _client(alice).post(
        "/jobs/new/",
        {**_form(), **_search(**{"search.max_trials": "0", "search.params": bad_params})},
    )
    page = answer.content.decode()
    assert answer.status_code == 200
    assert Experiment.objects.count() == 0 and Job.objects.count() == 0
    assert "must be a whole number from 1 to 1000" in _field_error(page, "search.max_trials")
    params = _field_error(page, "search.params")
    assert "lr.low: required: a number" in params
    assert "dim.values: required: a non-empty list" in params
    assert "The experiment was not submitted: fix the 3 errors shown in the search section" in page
    # What was typed stays, and the section stays ticked.
    assert 'value="0"' in page and html.escape("values: []") in page
    assert re.search(r'<input type="checkbox" name="experiment"[^>]*checked>', page)


def test_a_required_field_and_a_budget_clash(alice: User) -> None:
    client = _client(alice)
    page = client.post(
        "/jobs/new/", {**_form(), **_search(**{"search.metric": "", "search.max_budget": ""})}
    ).content.decode()
    assert "required" in _field_error(page, "search.metric")
    assert "required for asha" in _field_error(page, "search.max_budget")
    clash = "epochs: {type: int, low: 1, high: 5}"
    page = client.post(
        "/jobs/new/", {**_form(), **_search(**{"search.params": clash})}
    ).content.decode()
    assert "search.budget_arg: 'epochs' is a searched parameter too" in _section_errors(page)
    assert Experiment.objects.count() == 0


def test_bad_yaml_in_the_parameters_is_named_beside_them(alice: User) -> None:
    page = (
        _client(alice)
        .post("/jobs/new/", {**_form(), **_search(**{"search.params": "lr: [unclosed"})})
        .content.decode()
    )
    assert _field_error(page, "search.params")
    assert Experiment.objects.count() == 0


def test_job_and_search_errors_show_together(alice: User) -> None:
    page = (
        _client(alice)
        .post(
            "/jobs/new/",
            {
                **_form(**{"workers.min": "3", "workers.max": "1"}),
                **_search(**{"search.goal": "up"}),
            },
        )
        .content.decode()
    )
    assert _field_error(page, "workers.max")
    assert "expected one of minimize, maximize" in _field_error(page, "search.goal")
    assert "The experiment was not submitted" in page
    assert "and those of the search section" in page
    assert Experiment.objects.count() == 0 and Job.objects.count() == 0


def test_unticked_the_section_is_ignored(alice: User) -> None:
    answer = _client(alice).post(
        "/jobs/new/", {**_form(), **_search(experiment=None, **{"search.max_trials": "x"})}
    )
    assert answer.status_code == 302 and answer["Location"].startswith("/jobs/")
    assert Job.objects.count() == 1 and Experiment.objects.count() == 0
