"""Job spec validation: every bad input is a 400 that names the field, and creates nothing."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> APIClient:
    alice = make_user("alice")
    viewer = make_user("victor")
    make_team("recsys", members={alice: Role.MEMBER, viewer: Role.VIEWER})
    make_team("other")
    make_node(cpus=4, memory_mb=8192, gpus=2)
    api = APIClient()
    api.force_authenticate(alice)
    return api


def _post(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/jobs/", body, format="json")


def test_valid_spec_creates_a_pending_job_with_defaults(client: APIClient) -> None:
    response = _post(
        client,
        {"name": "mf", "team": "recsys", "entrypoint": "ps_runtime.examples.movielens:train"},
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "pending"
    assert body["priority"] == "normal"
    assert body["spec"]["workers"] == {
        "min": 1,
        "max": 1,
        "resources": {"cpu": 1.0, "memory_mb": 1024, "gpu": 0},
    }
    assert body["spec"]["parameter_servers"]["replicas"] == 1
    assert body["spec"]["parameter_servers"]["replication"] == 0
    assert "runtime_token" not in body


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"bogus": 1}, ["bogus"]),
        ({"workers": {"min": 3, "max": 2}}, ["workers", "max"]),
        ({"workers": {"min": "many"}}, ["workers", "min"]),
        ({"workers": {"min": 1, "resources": {"gpu": 3}}}, ["workers", "resources", "gpu"]),
        (
            {"workers": {"min": 1, "resources": {"cpu": 2, "disk": 5}}},
            ["workers", "resources", "disk"],
        ),
        (
            {"parameter_servers": {"replicas": 1, "resources": {"cpu": 99}}},
            ["parameter_servers", "resources", "cpu"],
        ),
        ({"parameter_servers": {"replicas": 0}}, ["parameter_servers", "replicas"]),
        (
            {"parameter_servers": {"replicas": 2, "replication": 2}},
            ["parameter_servers", "replication"],
        ),
        (
            {"parameter_servers": {"replicas": 4, "replication": 3}},
            ["parameter_servers", "replication"],
        ),
        ({"priority": "urgent"}, ["priority"]),
        ({"entrypoint": "not a function"}, ["entrypoint"]),
        ({"team": "other"}, ["team"]),
        ({"team": "nope"}, ["team"]),
        ({"name": "has spaces"}, ["name"]),
        ({"args": [1, 2]}, ["args"]),
        ({"max_restarts": -1}, ["max_restarts"]),
    ],
)
def test_invalid_spec_is_rejected_naming_the_field(
    client: APIClient, overrides: dict[str, Any], path: list[str]
) -> None:
    response = _post(client, spec(**overrides))
    assert response.status_code == 400
    node: Any = response.json()
    for key in path:
        assert key in node, f"error does not name {'.'.join(path)}: {response.json()}"
        node = node[key]
    assert Job.objects.count() == 0


def test_missing_required_fields_are_named(client: APIClient) -> None:
    response = _post(client, {})
    assert response.status_code == 400
    assert set(response.json()) == {"name", "team", "entrypoint"}


@pytest.mark.parametrize("team", ["other", "nope"])
def test_a_team_that_is_not_yours_is_named_in_a_sentence(client: APIClient, team: str) -> None:
    """A team that exists and one that does not read alike (nothing says which exists)."""
    response = _post(client, spec(team=team))
    assert response.status_code == 400
    assert response.json()["team"] == [f"You are not a member of team '{team}'."]


def test_viewer_cannot_submit(client: APIClient) -> None:
    viewer = make_user("vera")
    from trainhub.tenancy.models import Team
    from trainhub.tenancy.services import add_member

    add_member(team=Team.objects.get(slug="recsys"), user=viewer, role=Role.VIEWER)
    client.force_authenticate(viewer)
    response = _post(client, spec())
    assert response.status_code == 403  # the contract: a viewer's submit is forbidden
    assert "Viewers" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_a_job_larger_than_quota_plus_borrowing_limit_is_refused_naming_the_resource(
    client: APIClient,
) -> None:
    from trainhub.tenancy.models import Quota

    Quota.objects.filter(team__slug="recsys").update(cpu=2, borrowing_limit_cpu=1)
    # Coordinator 1 + one PS 1 + two workers of 1 CPU: 4 CPUs, and the team may use 3.
    response = _post(
        client,
        {
            "name": "big",
            "team": "recsys",
            "entrypoint": "ps_runtime.examples.movielens:train",
            "workers": {"min": 2, "max": 4, "resources": {"cpu": 1}},
        },
    )
    assert response.status_code == 400, response.json()
    message = response.json()["team"][0]
    assert "4 CPUs" in message and "may never use more than 3" in message
    assert not Job.objects.exists()

    # One worker fits the 3 CPUs; an unlimited resource (memory) bounds nothing.
    response = _post(
        client,
        {
            "name": "small",
            "team": "recsys",
            "entrypoint": "ps_runtime.examples.movielens:train",
            "workers": {"min": 1, "max": 4, "resources": {"cpu": 1, "memory_mb": 4096}},
        },
    )
    assert response.status_code == 201, response.json()


def test_a_production_job_larger_than_the_nominal_quota_is_refused(client: APIClient) -> None:
    from trainhub.tenancy.models import Quota

    Quota.objects.filter(team__slug="recsys").update(cpu=2)  # borrowing unlimited
    body = {
        "name": "prod",
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "priority": "production",
    }
    response = _post(client, body)  # coordinator, one PS, one worker: 3 CPUs
    assert response.status_code == 400, response.json()
    assert "production jobs never borrow" in response.json()["team"][0]
    assert _post(client, {**body, "priority": "normal"}).status_code == 201
