"""The API contract, rule by rule (docs/design.md "API contract"): JSON bodies only and
strictly, 409 for conflicts with state, JSON 404s under /api/, strict pagination, and a
schema that documents each of these answers."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Membership, Team

from ..factories import make_job, make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db


def _as(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def root() -> User:
    user = make_user("root", superuser=True)
    make_team("recsys", members={user: Role.ADMIN}, cpu=8, memory_mb=16384)
    make_node(cpus=8, memory_mb=16384)
    return user


def test_a_body_that_is_not_json_is_415_and_creates_nothing(root: User) -> None:
    team = {"slug": "vision", "name": "Vision"}
    form = _as(root).post("/api/v1/teams/", team, format="multipart")
    assert form.status_code == 415 and "detail" in form.json()
    text = _as(root).post("/api/v1/jobs/", "name=x", content_type="text/plain")
    assert text.status_code == 415
    assert not Team.objects.filter(slug="vision").exists() and not Job.objects.exists()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused(root: User, number: str) -> None:
    body = f'{{"cpu": {number}, "memory_mb": 1024, "gpu": 0}}'
    response = _as(root).put("/api/v1/teams/recsys/quota/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "JSON parse error" in response.json()["detail"]
    assert Team.objects.get(slug="recsys").quota.cpu == 8


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"name": 0}, "name", "Expected a string."),
        ({"name": ["a"]}, "name", "Expected a string."),
    ],
)
def test_a_value_of_the_wrong_json_type_is_refused_naming_it(
    root: User, body: dict[str, Any], field: str, message: str
) -> None:
    job = make_job(root)
    response = _as(root).post(f"/api/v1/jobs/{job.pk}/clone/", body)
    assert response.status_code == 400
    assert response.json() == {field: [message]}
    assert Job.objects.count() == 1


def test_the_job_spec_checks_json_types_in_nested_sections(root: User) -> None:
    client = _as(root)
    count = client.post("/api/v1/jobs/", spec(workers={"min": "1"}))
    assert count.status_code == 400
    assert count.json() == {"workers": {"min": ["Expected a whole number."]}}
    cpu = client.post("/api/v1/jobs/", spec(workers={"min": 1, "resources": {"cpu": True}}))
    assert cpu.status_code == 400
    assert cpu.json() == {"workers": {"resources": {"cpu": ["Expected a number."]}}}
    assert not Job.objects.exists()


def test_taken_names_are_409(root: User) -> None:
    client = _as(root)
    team = client.post("/api/v1/teams/", {"slug": "recsys", "name": "Again"})
    assert team.status_code == 409 and "recsys" in team.json()["detail"]
    user = client.post("/api/v1/users/", {"username": "root", "password": "long-enough-pw"})
    assert user.status_code == 409 and "root" in user.json()["detail"]
    assert User.objects.filter(username="root").count() == 1


def test_the_last_admin_of_a_team_cannot_go(root: User) -> None:
    client = _as(root)
    members = "/api/v1/teams/recsys/members/"
    removed = client.delete(f"{members}root/")
    demoted = client.patch(f"{members}root/", {"role": "member"})
    reposted = client.post(members, {"username": "root", "role": "viewer"})
    assert [removed.status_code, demoted.status_code, reposted.status_code] == [409] * 3
    assert "last admin" in reposted.json()["detail"]
    assert Membership.objects.get(user=root).role == Role.ADMIN


def test_unknown_members_and_teams_that_are_not_yours_are_404(root: User) -> None:
    client = _as(root)
    nobody = client.post("/api/v1/teams/recsys/members/", {"username": "nobody", "role": "member"})
    assert nobody.status_code == 404 and "nobody" in nobody.json()["detail"]
    bob = make_user("bob")
    make_team("vision", members={bob: Role.ADMIN})
    assert _as(bob).get("/api/v1/teams/recsys/").status_code == 404


@pytest.mark.parametrize(
    "path", ["/api/v1/nope/", "/api/v1/jobs/-1.1/", "/api/v1/teams/%C2%84/", "/api/nothing"]
)
def test_unknown_paths_under_api_answer_json(root: User, path: str) -> None:
    response = _as(root).get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}


def test_unknown_pages_elsewhere_stay_html(root: User) -> None:
    response = _as(root).get("/no-such-page/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    "query",
    [{"limit": "x"}, {"limit": "0"}, {"offset": "-1"}, {"offset": "null"}, {"limit": "1.5"}],
)
def test_a_bad_page_is_400_naming_the_parameter(root: User, query: dict[str, str]) -> None:
    response = _as(root).get("/api/v1/teams/", query)
    assert response.status_code == 400
    assert list(response.json()) == list(query)


def test_a_large_limit_gives_the_most_there_is(root: User) -> None:
    assert _as(root).get("/api/v1/teams/", {"limit": "100000"}).status_code == 200
    huge = "132861405075632446663342556184576"  # any whole number is schema-valid
    assert _as(root).get("/api/v1/teams/", {"limit": huge, "offset": huge}).status_code == 200


def test_a_patch_without_the_role_changes_nothing(root: User) -> None:
    response = _as(root).patch("/api/v1/teams/recsys/members/root/", {}, format="json")
    assert response.status_code == 200 and response.json()["role"] == "admin"
    assert Membership.objects.get(user=root).role == Role.ADMIN


def _operation(schema: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return schema["paths"][path][method]


def test_the_schema_documents_every_error_answer(root: User) -> None:
    response = _as(root).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    schema = response.json()
    assert schema["openapi"].startswith("3.1")
    codes = {
        (path, method): set(operation["responses"])
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }
    assert codes[("/api/v1/jobs/", "post")] >= {"200", "201", "400", "401", "403", "409", "415"}
    assert codes[("/api/v1/jobs/{id}/scale/", "post")] >= {"400", "404", "409", "415"}
    assert codes[("/api/v1/jobs/", "get")] >= {"200", "400", "401"}
    assert "403" not in codes[("/api/v1/jobs/", "get")]  # any signed-in user may list
    assert codes[("/api/v1/teams/{slug}/members/{username}/", "delete")] >= {"404", "409"}
    assert codes[("/api/v1/teams/{slug}/quota/", "put")] >= {"400", "403", "409", "415"}
    assert codes[("/api/v1/tokens/", "post")] >= {"429"}
    assert codes[("/api/v1/code/", "post")] >= {"404", "413", "415"}
    assert codes[("/api/v1/auth/token/", "post")] >= {"400", "429"}
    assert "401" not in codes[("/api/v1/auth/token/", "post")]
    for (path, _), answered in codes.items():
        if path != "/api/v1/auth/token/" and path != "/api/v1/nodes/enroll/":
            assert "401" in answered, path
        if "{" in path:
            assert "404" in answered, path
    error = _operation(schema, "/api/v1/jobs/{id}/", "get")["responses"]["404"]
    assert error["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    job_spec = schema["components"]["schemas"]["JobSpecRequest"]
    assert job_spec["additionalProperties"] is False
    assert "pattern" in job_spec["properties"]["entrypoint"]
