"""The quota resource: nominal, limits, caps and derived usage; caps hold at submission."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.events import QuotaChanged
from trainhub.jobs.choices import TaskRole
from trainhub.jobs.models import Job
from trainhub.jobs.services import Placement, place_job
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Quota

from ..event_capture import HANDLER, capturer
from ..factories import make_job, make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db

SMALL = {"cpu": 0.5, "memory_mb": 512}


@pytest.fixture
def world() -> dict[str, Any]:
    root, alice = make_user("root", superuser=True), make_user("alice")
    make_team("team-a", members={alice: Role.ADMIN}, cpu=2, memory_mb=4096, gpu=1)
    make_team("team-b", cpu=4, memory_mb=8192, gpu=0)
    node, _ = make_node(cpus=16, memory_mb=65536, gpus=2)
    admin = APIClient()
    admin.force_authenticate(root)
    member = APIClient()
    member.force_authenticate(alice)
    return {"root": root, "alice": alice, "admin": admin, "member": member, "node": node}


def _run(job: Job, node_id: int, gpus: int = 0) -> None:
    """Place the job's minimal gang on the node, as the scheduler would."""
    res = job.job_spec.workers.resources
    place_job(
        job=job,
        now=timezone.now(),
        placements=[
            Placement(TaskRole.COORDINATOR, 0, node_id, None, 0.5, 512),
            Placement(TaskRole.PS, 0, node_id, 41000, 0.5, 512),
            Placement(
                TaskRole.WORKER, 0, node_id, 41001, res.cpu, res.memory_mb, list(range(gpus))
            ),
        ],
    )


def test_platform_admin_sets_quota_and_it_is_audited_and_triggers_a_cycle(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.EVENT_HANDLERS = [HANDLER]
    capture = capturer(django_capture_on_commit_callbacks)
    body = {
        "cpu": 8,
        "memory_mb": 16384,
        "gpu": 2,
        "borrowing_limit": {"cpu": 4, "memory_mb": None, "gpu": 0},
        "lending_limit": {"gpu": 1},
        "priority_caps": [{"priority": "production", "gpu": 1}],
    }
    with capture() as published:
        response = world["admin"].put("/api/v1/teams/team-a/quota/", body, format="json")
    assert response.status_code == 200, response.content
    got = world["member"].get("/api/v1/teams/team-a/quota/").json()
    assert got["cpu"] == 8 and got["memory_mb"] == 16384 and got["gpu"] == 2
    assert got["borrowing_limit"] == {"cpu": 4.0, "memory_mb": None, "gpu": 0}
    assert got["lending_limit"] == {"cpu": None, "memory_mb": None, "gpu": 1}
    assert got["priority_caps"] == [
        {"priority": "production", "cpu": None, "memory_mb": None, "gpu": 1}
    ]
    quota = Quota.objects.get(team__slug="team-a")  # what the scheduler reads
    assert (quota.cpu, quota.borrowing_limit_cpu, quota.lending_limit_gpu) == (8, 4, 1)
    team = Quota.objects.get(team__slug="team-a").team_id
    # The scheduler's trigger queues a cycle on it (tests/trainhub/scheduling/test_triggers.py).
    assert QuotaChanged(team_id=team) in published, "a quota change must publish QuotaChanged"
    entry = AuditEntry.objects.filter(action="quota.update").first()
    assert entry is not None and entry.actor_name == "root"
    assert entry.before is not None and entry.after is not None
    assert entry.before["cpu"] == 2 and entry.after["cpu"] == 8
    assert AuditEntry.objects.filter(action="priority_caps.update").exists()


def test_quota_cannot_go_below_what_production_jobs_hold(world: dict[str, Any]) -> None:
    job = make_job(
        world["alice"],
        team="team-a",
        priority="production",
        workers={"min": 1, "max": 1, "resources": {**SMALL, "gpu": 1}},
    )
    _run(job, world["node"].pk, gpus=1)
    response = world["admin"].put(
        "/api/v1/teams/team-a/quota/", {"cpu": 8, "memory_mb": 8192, "gpu": 0}, format="json"
    )
    assert response.status_code == 409  # well-formed, but the running jobs hold more
    assert "production jobs hold gpu 1" in response.json()["detail"]
    assert Quota.objects.get(team__slug="team-a").cpu == 2


def test_usage_shows_within_quota_borrowed_and_lent(world: dict[str, Any]) -> None:
    # team-a (cpu 2) runs 3 CPUs: 2 within its quota, 1 borrowed from idle team-b.
    job = make_job(world["alice"], team="team-a", workers={"min": 1, "resources": {"cpu": 2}})
    _run(job, world["node"].pk)
    usage = world["member"].get("/api/v1/teams/team-a/quota/").json()["usage"]
    assert usage["used"]["cpu"] == 3
    assert usage["within_quota"]["cpu"] == 2
    assert usage["borrowed"]["cpu"] == 1
    normal = next(p for p in usage["by_priority"] if p["priority"] == "normal")
    assert normal["held"]["cpu"] == 3 and normal["requested"]["cpu"] == 3
    lent = world["admin"].get("/api/v1/teams/team-b/quota/").json()["usage"]["lent"]
    assert lent["cpu"] == 1


def test_priority_cap_refuses_what_does_not_fit(world: dict[str, Any]) -> None:
    world["admin"].put(
        "/api/v1/teams/team-a/quota/",
        {
            "cpu": 2,
            "memory_mb": 4096,
            "gpu": 1,
            "priority_caps": [{"priority": "production", "cpu": 3}],
        },
        format="json",
    )
    member = world["member"]
    prod = spec(team="team-a", priority="production", workers={"min": 1, "resources": SMALL})
    assert member.post("/api/v1/jobs/", prod, format="json").status_code == 201  # 1.5 CPUs
    again = member.post("/api/v1/jobs/", prod, format="json")
    assert again.status_code == 201  # 3.0 CPUs: exactly at the cap
    full = member.post("/api/v1/jobs/", prod, format="json")
    assert full.status_code == 409, full.content
    assert "at most cpu 3 at production" in full.json()["detail"]
    too_big = spec(team="team-a", priority="production", workers={"min": 5, "resources": SMALL})
    alone = member.post("/api/v1/jobs/", too_big, format="json")
    # 3.5 CPUs: beyond the cap, and beyond the 2-CPU quota that production jobs cannot
    # borrow past; the quota is checked first (a cap alone: tests/trainhub/api/test_dry_run.py).
    assert alone.status_code == 400 and "never use more than 2" in alone.json()["team"][0]
    # Other priorities are not capped.
    assert member.post("/api/v1/jobs/", spec(team="team-a"), format="json").status_code == 201
    assert Job.objects.filter(priority="production").count() == 2


def test_scale_within_min_and_max(world: dict[str, Any]) -> None:
    job = make_job(world["alice"], team="team-a", workers={"min": 1, "max": 3})
    member = world["member"]
    response = member.post(f"/api/v1/jobs/{job.pk}/scale/", {"workers": 3}, format="json")
    assert response.status_code == 200 and response.json()["target_workers"] == 3
    bad = member.post(f"/api/v1/jobs/{job.pk}/scale/", {"workers": 4}, format="json")
    assert bad.status_code == 409 and "between 1 and 3" in bad.json()["detail"]
    events = member.get(f"/api/v1/jobs/{job.pk}/events/").json()
    assert [e["reason"] for e in events if e["kind"] == "scale"] == ["workers 1 -> 3"]
    member.post(f"/api/v1/jobs/{job.pk}/cancel/")
    over = member.post(f"/api/v1/jobs/{job.pk}/scale/", {"workers": 2}, format="json")
    assert over.status_code == 409


def test_clone_and_list_filters(world: dict[str, Any]) -> None:
    member = world["member"]
    job = make_job(world["alice"], team="team-a", name="first")
    clone = member.post(f"/api/v1/jobs/{job.pk}/clone/", {"name": "second"}, format="json")
    assert clone.status_code == 201, clone.content
    assert clone.json()["spec"]["entrypoint"] == job.spec["entrypoint"]
    member.post(f"/api/v1/jobs/{job.pk}/cancel/")
    page = member.get("/api/v1/jobs/", {"state": "pending", "team": "team-a"}).json()
    assert [j["name"] for j in page["results"]] == ["second"]
    assert member.get("/api/v1/jobs/", {"name": "fir"}).json()["count"] == 1
    assert member.get("/api/v1/jobs/", {"priority": "production"}).json()["count"] == 0
    assert member.get("/api/v1/jobs/", {"state": "bogus"}).status_code == 400
    paged = member.get("/api/v1/jobs/", {"limit": 1}).json()
    assert paged["count"] == 2 and len(paged["results"]) == 1 and paged["next"]


def test_platform_admin_creates_users_and_teams(world: dict[str, Any]) -> None:
    admin = world["admin"]
    user = admin.post(
        "/api/v1/users/",
        {"username": "carol", "password": "long-enough-pw", "email": "c@example.com"},
        format="json",
    )
    assert user.status_code == 201, user.content
    assert "password" not in user.json()
    team = admin.post("/api/v1/teams/", {"slug": "vision", "name": "Vision"}, format="json")
    assert team.status_code == 201
    dup = admin.post("/api/v1/teams/", {"slug": "vision", "name": "Again"}, format="json")
    assert dup.status_code == 409 and "vision" in dup.json()["detail"]
    again = admin.post("/api/v1/users/", {"username": "carol", "password": "other-long-pw"})
    assert again.status_code == 409 and "carol" in again.json()["detail"]
    added = admin.post(
        "/api/v1/teams/vision/members/", {"username": "carol", "role": "admin"}, format="json"
    )
    assert added.status_code == 201
    carol = APIClient()
    token = carol.post(
        "/api/v1/auth/token/", {"username": "carol", "password": "long-enough-pw"}, format="json"
    ).json()["token"]
    carol.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert carol.get("/api/v1/users/me/").json()["teams"] == [{"team": "vision", "role": "admin"}]
    assert set(AuditEntry.objects.values_list("action", flat=True)) >= {
        "user.create",
        "team.create",
        "member.add",
    }


def test_node_cordon_drain_uncordon_are_audited(world: dict[str, Any]) -> None:
    node = world["node"].pk
    admin = world["admin"]
    assert admin.post(f"/api/v1/nodes/{node}/cordon/").json()["state"] == "cordoned"
    drained = admin.post(f"/api/v1/nodes/{node}/drain/").json()
    assert drained["state"] == "draining" and drained["drained"] is True
    assert admin.post(f"/api/v1/nodes/{node}/uncordon/").json()["state"] == "active"
    assert list(
        AuditEntry.objects.filter(object_type="nodes.node")
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["node.cordon", "node.drain", "node.uncordon"]


def test_enrollment_tokens_are_listed_without_secret_and_revoked(world: dict[str, Any]) -> None:
    admin = world["admin"]
    issued = admin.post("/api/v1/enrollment-tokens/", {"max_uses": 2}, format="json").json()
    listed = admin.get("/api/v1/enrollment-tokens/").json()["results"]
    assert issued["token"] not in str(listed)
    assert admin.post(f"/api/v1/enrollment-tokens/{issued['id']}/revoke/").json()["revoked"]
    facts = {"hostname": "n", "address": "127.0.0.1", "cpus": 1, "memory_mb": 1024}
    enroll = APIClient().post(
        "/api/v1/nodes/enroll/", {"token": issued["token"], **facts}, format="json"
    )
    assert enroll.status_code == 400 and "revoked" in enroll.json()["token"][0]
    assert world["member"].get("/api/v1/enrollment-tokens/").status_code == 403
    assert AuditEntry.objects.filter(action="enrollment_token.revoke").count() == 1
