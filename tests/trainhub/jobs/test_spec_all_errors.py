"""A refused spec names every error at once: an unknown field no longer hides the others."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient
from trainhub.cli.api_client import _describe
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> APIClient:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    make_node(cpus=4, memory_mb=8192, gpus=2)
    api = APIClient()
    api.force_authenticate(alice)
    return api


def test_an_unknown_field_and_max_below_min_are_both_in_the_400_and_the_cli_says_both(
    client: APIClient,
) -> None:
    body = spec(foo=1, workers={"min": 3, "max": 2})
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert errors["foo"] == ["Unknown field 'foo'."]
    assert errors["workers"] == {"max": ["max (2) must be at least min (3)."]}
    assert _describe(errors) == [
        "workers.max: max (2) must be at least min (3).",
        "foo: Unknown field 'foo'.",
    ]
    assert Job.objects.count() == 0


def test_errors_in_every_section_are_named_together(client: APIClient) -> None:
    body = spec(
        priority="urgent",
        workers={"min": 1, "max": "2", "resources": {"cpu": 0.5, "disk": 5}},
        parameter_servers={"replicas": 1, "resources": {"cpu": 2000}},
        bogus=True,
    )
    errors = client.post("/api/v1/jobs/", body, format="json").json()
    assert set(_describe(errors)) == {
        'priority: "urgent" is not a valid choice.',
        "workers.max: Expected a whole number.",
        "workers.resources.disk: Unknown field 'disk'.",
        "parameter_servers.resources.cpu: Ensure this value is less than or equal to 1024.",
        "bogus: Unknown field 'bogus'.",
    }
