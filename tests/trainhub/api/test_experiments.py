"""The experiments API: create (errors name the field, nothing created), read, act."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient
from trainhub.experiments.models import Experiment
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..experiments.driver import end_run
from ..factories import make_team, make_user, spec

pytestmark = pytest.mark.django_db

SEARCH = {
    "method": "asha",
    "metric": "test_rmse",
    "max_trials": 4,
    "max_concurrent": 2,
    "max_budget": 3,
    "params": {"lr": {"type": "log_uniform", "low": 0.001, "high": 0.1}},
}


def _as(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def people(settings: Any) -> dict[str, User]:
    settings.EVENT_HANDLERS = []
    alice, viewer, eve = make_user("alice"), make_user("vic"), make_user("eve")
    make_team("recsys", members={alice: Role.MEMBER, viewer: Role.VIEWER})
    make_team("other", members={eve: Role.MEMBER})
    return {"alice": alice, "viewer": viewer, "eve": eve}


def _create(client: APIClient, **search: Any) -> Any:
    body = {**spec(name="mf-search"), "search": {**SEARCH, **search}}
    return client.post("/api/v1/experiments/", body, format="json")


def test_create_starts_trials_and_reads_back(people: dict[str, User]) -> None:
    response = _create(_as(people["alice"]))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "running" and body["team"] == "recsys"
    assert [t["number"] for t in body["trials"]] == [1, 2]
    assert body["search"]["max_budget"] == 3 and body["search"]["reduction_factor"] == 3
    job = Job.objects.get(pk=body["trials"][0]["job"])
    assert job.job_spec.args["epochs"] == 1
    listed = _as(people["alice"]).get("/api/v1/experiments/").json()
    assert [e["id"] for e in listed["results"]] == [body["id"]]


def test_bad_fields_are_named_and_nothing_is_created(people: dict[str, User]) -> None:
    response = _create(
        _as(people["alice"]),
        min_budget=5,
        params={"lr": {"type": "uniform", "low": 1, "high": 0}},
    )
    assert response.status_code == 400
    errors = response.json()
    assert "search.min_budget" in errors and "search.params.lr.high" in errors
    bad_job = _as(people["alice"]).post(
        "/api/v1/experiments/",
        {**spec(name="x", workers={"min": 0}), "search": SEARCH},
        format="json",
    )
    assert bad_job.status_code == 400 and "workers" in bad_job.json()
    no_search = _as(people["alice"]).post("/api/v1/experiments/", spec(), format="json")
    assert no_search.status_code == 400 and "search" in no_search.json()
    assert not Experiment.objects.exists() and not Job.objects.exists()


def test_other_teams_see_nothing_and_viewers_cannot_act(people: dict[str, User]) -> None:
    pk = _create(_as(people["alice"])).json()["id"]
    assert _as(people["eve"]).get(f"/api/v1/experiments/{pk}/").status_code == 404
    assert _as(people["eve"]).post(f"/api/v1/experiments/{pk}/cancel/").status_code == 404
    assert _as(people["viewer"]).get(f"/api/v1/experiments/{pk}/").status_code == 200
    assert _as(people["viewer"]).post(f"/api/v1/experiments/{pk}/pause/").status_code == 403
    assert _create(_as(people["viewer"])).status_code == 403
    assert APIClient().get("/api/v1/experiments/").status_code in (401, 403)


def test_pause_resume_cancel_and_conflicts(people: dict[str, User]) -> None:
    client = _as(people["alice"])
    pk = _create(client).json()["id"]
    assert client.post(f"/api/v1/experiments/{pk}/resume/").status_code == 409
    assert client.post(f"/api/v1/experiments/{pk}/pause/").json()["state"] == "paused"
    assert client.post(f"/api/v1/experiments/{pk}/resume/").json()["state"] == "running"
    body = client.post(f"/api/v1/experiments/{pk}/cancel/").json()
    assert body["state"] == "cancelled"
    assert {t["state"] for t in body["trials"]} == {"cancelled"}
    assert client.post(f"/api/v1/experiments/{pk}/cancel/").status_code == 409


def test_curves_put_each_trials_metric_against_its_budget(people: dict[str, User]) -> None:
    client = _as(people["alice"])
    body = _create(client).json()
    job = Job.objects.get(pk=body["trials"][0]["job"])
    end_run(job, test_rmse=0.93, epoch=1)
    curves = client.get(f"/api/v1/experiments/{body['id']}/curves/").json()
    assert curves["metric"] == "test_rmse" and curves["budget"] == "epochs"
    first = next(t for t in curves["trials"] if t["number"] == 1)
    assert first["points"] == [[1.0, 0.93]]


def test_curves_read_a_fixed_number_of_queries(
    people: dict[str, User], django_assert_max_num_queries: Any
) -> None:
    client = _as(people["alice"])
    body = _create(client, max_concurrent=4).json()
    for trial in body["trials"]:
        end_run(Job.objects.get(pk=trial["job"]), test_rmse=0.9, epoch=1)
    with django_assert_max_num_queries(8):
        curves = client.get(f"/api/v1/experiments/{body['id']}/curves/").json()
    assert [len(t["points"]) for t in curves["trials"]] == [1, 1, 1, 1]
