"""The OpenAPI schema and the docs page come from TrainHub itself, with no CDN."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient
from trainhub.tenancy.choices import Role
from trainhub.tenancy.tokens import issue_token

from ..factories import make_team, make_user, spec

pytestmark = pytest.mark.django_db


def test_docs_and_schema_are_served_locally() -> None:
    client = APIClient()
    client.force_authenticate(make_user("alice"))
    page = client.get("/api/docs/")
    assert page.status_code == 200
    sources = re.findall(rb'(?:src|href)="([^"]+)"', page.content)
    assert sources and all(s.startswith(b"/") for s in sources), sources
    assert client.get(sources[0].decode()).status_code == 200
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    quota = schema["components"]["schemas"]["Quota"]["properties"]
    assert {"cpu", "memory_mb", "gpu", "borrowing_limit", "lending_limit"} <= set(quota)
    for path in ("/api/v1/tokens/{id}/", "/api/v1/teams/{slug}/members/", "/api/v1/users/"):
        assert path in schema["paths"]


def test_operations_are_grouped_by_resource_and_components_are_named_once() -> None:
    """The docs page lists operations under their resource (jobs, teams, nodes…), not one
    `v1` heading; a request body's component is `<Name>Request`, not `…RequestRequest`."""
    client = APIClient()
    client.force_authenticate(make_user("alice"))
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operations = [
        (path, op) for path, item in schema["paths"].items() for op in item.values() if "tags" in op
    ]
    for path, op in operations:
        resource = path.removeprefix("/api/v1/").split("/")[0]
        assert op["tags"] == [resource], (path, op["tags"])
    assert {"jobs", "teams", "nodes", "users"} <= {op["tags"][0] for _, op in operations}
    names = set(schema["components"]["schemas"])
    assert not [n for n in names if n.endswith("RequestRequest")], sorted(names)
    assert {"CloneRequest", "ScaleRequest", "WhatIfRequest"} <= names


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/"])
def test_the_schema_and_the_docs_need_a_login(path: str) -> None:
    anonymous = APIClient().get(path)
    assert anonymous.status_code in (401, 403)
    assert b"/api/v1/jobs/" not in anonymous.content
    script = APIClient()
    script.credentials(
        HTTP_AUTHORIZATION=f"Token {issue_token(user=make_user('bob'), expires_at=None).secret}"
    )
    assert script.get(path).status_code == 200


def test_null_characters_in_job_args_are_a_400_not_a_crash() -> None:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    client = APIClient()
    client.force_authenticate(alice)
    response = client.post("/api/v1/jobs/", spec(args={"data": "a\x00b"}), format="json")
    assert response.status_code == 400 and "args" in response.json()


def test_huge_page_parameters_are_bounded() -> None:
    client = APIClient()
    client.force_authenticate(make_user("root", superuser=True))
    response = client.get("/api/v1/enrollment-tokens/", {"limit": 2**70, "offset": 2**70})
    assert response.status_code == 200 and response.json()["results"] == []
