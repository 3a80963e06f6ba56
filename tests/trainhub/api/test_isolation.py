"""Object-level permissions: outside your teams everything is 404; roles limit writes."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> dict[str, Any]:
    cache.clear()  # throttle counters
    alice, bob, victor = make_user("alice"), make_user("bob"), make_user("victor")
    make_team("team-a", members={alice: Role.MEMBER, victor: Role.VIEWER})
    make_team("team-b", members={bob: Role.ADMIN})
    node, _ = make_node()
    job_b = make_job(bob, team="team-b")
    job_a = make_job(alice, team="team-a")
    return {
        "alice": alice,
        "bob": bob,
        "victor": victor,
        "job_b": job_b,
        "job_a": job_a,
        "node": node,
    }


def _as(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_team_b_is_invisible_to_a_member_of_team_a(world: dict[str, Any]) -> None:
    client = _as(world["alice"])
    job = world["job_b"].pk
    requests = [
        ("get", f"/api/v1/jobs/{job}/", None),
        ("get", f"/api/v1/jobs/{job}/events/", None),
        ("get", f"/api/v1/jobs/{job}/metrics/", None),
        ("get", f"/api/v1/jobs/{job}/logs/", None),
        ("post", f"/api/v1/jobs/{job}/cancel/", {}),
        ("post", f"/api/v1/jobs/{job}/scale/", {"workers": 2}),
        ("post", f"/api/v1/jobs/{job}/clone/", {}),
        ("get", "/api/v1/teams/team-b/", None),
        ("get", "/api/v1/teams/team-b/quota/", None),
        ("put", "/api/v1/teams/team-b/quota/", {"cpu": 1, "memory_mb": 1, "gpu": 0}),
        ("get", "/api/v1/teams/team-b/members/", None),
        ("post", "/api/v1/teams/team-b/members/", {"username": "alice", "role": "admin"}),
        ("patch", "/api/v1/teams/team-b/members/bob/", {"role": "viewer"}),
        ("delete", "/api/v1/teams/team-b/members/bob/", None),
    ]
    for method, url, body in requests:
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code == 404, (method, url, response.status_code, response.content)
    listed = client.get("/api/v1/jobs/").json()
    assert [j["id"] for j in listed["results"]] == [world["job_a"].pk]
    assert client.get("/api/v1/jobs/", {"team": "team-b"}).json()["count"] == 0
    assert [t["slug"] for t in client.get("/api/v1/teams/").json()["results"]] == ["team-a"]
    job_b = Job.objects.get(pk=job)
    assert job_b.state == "pending" and job_b.target_workers is None
    assert Job.objects.count() == 2


def test_viewer_reads_but_cannot_submit_or_act(world: dict[str, Any]) -> None:
    client = _as(world["victor"])
    job = world["job_a"].pk
    assert client.get(f"/api/v1/jobs/{job}/").status_code == 200
    assert client.get("/api/v1/teams/team-a/quota/").status_code == 200
    response = client.post("/api/v1/jobs/", spec(team="team-a"), format="json")
    assert response.status_code == 403, response.content
    assert "Viewers" in response.json()["detail"]
    for action, body in (("cancel", {}), ("scale", {"workers": 2}), ("clone", {})):
        assert client.post(f"/api/v1/jobs/{job}/{action}/", body, format="json").status_code == 403
    assert Job.objects.count() == 2


def test_only_team_admins_change_members_and_only_platform_admins_quotas_and_nodes(
    world: dict[str, Any],
) -> None:
    alice, bob = _as(world["alice"]), _as(world["bob"])
    add = {"username": "victor", "role": "member"}
    assert alice.post("/api/v1/teams/team-a/members/", add, format="json").status_code == 403
    assert bob.post("/api/v1/teams/team-b/members/", add, format="json").status_code == 201
    assert bob.get("/api/v1/teams/team-b/members/").json() == [
        {"username": "bob", "role": "admin"},
        {"username": "victor", "role": "member"},
    ]
    quota = {"cpu": 1, "memory_mb": 1024, "gpu": 0}
    assert bob.put("/api/v1/teams/team-b/quota/", quota, format="json").status_code == 403
    node = world["node"].pk
    assert bob.post(f"/api/v1/nodes/{node}/cordon/").status_code == 403
    assert bob.get("/api/v1/nodes/").status_code == 200
    assert bob.post("/api/v1/teams/", {"slug": "c", "name": "C"}, format="json").status_code == 403
    assert bob.get("/api/v1/users/").status_code == 403
    # The last admin cannot leave the team without a successor.
    assert bob.delete("/api/v1/teams/team-b/members/bob/").status_code == 409
    # ... nor step down to member: the team would have no admin left.
    demote = bob.patch("/api/v1/teams/team-b/members/bob/", {"role": "member"}, format="json")
    assert demote.status_code == 409, demote.content
    assert {"username": "bob", "role": "admin"} in bob.get("/api/v1/teams/team-b/members/").json()


def test_a_revoked_token_stops_working_at_once(world: dict[str, Any]) -> None:
    client = APIClient()
    login = client.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "pw-alice"}, format="json"
    )
    assert login.status_code == 201
    client.credentials(HTTP_AUTHORIZATION=f"Token {login.json()['token']}")
    issued = client.post("/api/v1/tokens/", {"name": "script"}, format="json").json()
    assert issued["expiry"] is not None  # at most TRAINHUB_TOKEN_MAX_DAYS away

    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {issued['token']}")
    assert script.get("/api/v1/jobs/").status_code == 200
    tokens = client.get("/api/v1/tokens/").json()
    assert len(tokens) == 2 and [t["current"] for t in tokens] == [True, False]
    assert issued["token"] not in str(tokens)  # stored hashed, never shown again

    assert client.delete(f"/api/v1/tokens/{issued['id']}/").status_code == 204
    assert script.get("/api/v1/jobs/").status_code == 401
    assert client.get("/api/v1/jobs/").status_code == 200  # the other token still works
    assert client.delete(f"/api/v1/tokens/{issued['id']}/").status_code == 404


def test_the_token_endpoint_is_rate_limited(world: dict[str, Any], settings: Any) -> None:
    client = APIClient()
    codes = [
        client.post(
            "/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json"
        ).status_code
        for _ in range(31)
    ]
    assert codes[:30] == [400] * 30
    assert codes[30] == 429


def test_a_token_stops_working_when_it_expires(world: dict[str, Any]) -> None:
    client = APIClient()
    client.force_authenticate(world["alice"])
    soon = timezone.now() + timedelta(seconds=1)
    soon_body = {"name": "soon", "expires_at": soon.isoformat()}
    issued = client.post("/api/v1/tokens/", soon_body, format="json")
    assert issued.status_code == 201, issued.content
    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {issued.json()['token']}")
    assert script.get("/api/v1/jobs/").status_code == 200
    time.sleep(1.2)
    assert script.get("/api/v1/jobs/").status_code == 401
    past_body = {"name": "past", "expires_at": "2000-01-01T00:00:00Z"}
    past = client.post("/api/v1/tokens/", past_body, format="json")
    assert past.status_code == 400
