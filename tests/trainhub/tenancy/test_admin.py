"""Quota management in the Django admin: validated, audited, and seen everywhere at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub import events
from trainhub.audit.models import AuditEntry
from trainhub.jobs.choices import TaskRole
from trainhub.jobs.services import Placement, place_job
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Membership, Quota, Team

from ..cli.helpers import login, trainhub
from ..factories import make_job, make_node, make_team, make_user

QUOTA_FIELDS = [
    "borrowing_limit_cpu",
    "borrowing_limit_memory_mb",
    "borrowing_limit_gpu",
    "lending_limit_cpu",
    "lending_limit_memory_mb",
    "lending_limit_gpu",
]


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[events.Event]:
    """The domain events delivered during the test (they still reach their handlers)."""
    seen: list[events.Event] = []
    deliver = events.deliver

    def recording(event: events.Event) -> None:
        seen.append(event)
        deliver(event)

    monkeypatch.setattr(events, "deliver", recording)
    return seen


def _change_form(team: Team, **quota: Any) -> dict[str, Any]:
    """The POST body of the team's admin change page, with `quota` changed."""
    current = Quota.objects.get(team=team)
    data: dict[str, Any] = {
        "name": team.name,
        "quota-TOTAL_FORMS": "1",
        "quota-INITIAL_FORMS": "1",
        "quota-MIN_NUM_FORMS": "1",
        "quota-MAX_NUM_FORMS": "1",
        "quota-0-id": str(current.pk),
        "quota-0-team": str(team.pk),
        "quota-0-cpu": str(current.cpu),
        "quota-0-memory_mb": str(current.memory_mb),
        "quota-0-gpu": str(current.gpu),
        "priority_caps-TOTAL_FORMS": "1",
        "priority_caps-INITIAL_FORMS": "0",
        "priority_caps-MIN_NUM_FORMS": "0",
        "priority_caps-MAX_NUM_FORMS": "1000",
        "priority_caps-0-team": str(team.pk),
        "priority_caps-0-priority": "production",
        "priority_caps-0-gpu": "4",
    }
    members = list(Membership.objects.filter(team=team))
    data.update(
        {
            "memberships-TOTAL_FORMS": str(len(members)),
            "memberships-INITIAL_FORMS": str(len(members)),
            "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000",
        }
    )
    for i, m in enumerate(members):
        data.update(
            {
                f"memberships-{i}-id": str(m.pk),
                f"memberships-{i}-team": str(team.pk),
                f"memberships-{i}-user": str(m.user_id),
                f"memberships-{i}-role": m.role,
            }
        )
    for name in QUOTA_FIELDS:
        value = getattr(current, name)
        data[f"quota-0-{name}"] = "" if value is None else str(value)
    data.update({f"quota-0-{k}": str(v) for k, v in quota.items()})
    return data


@pytest.mark.django_db(transaction=True)
def test_quota_edited_in_the_admin_shows_in_api_cli_scheduler_input_and_audit_log(
    live_server: Any, tmp_path: Path, published: list[events.Event]
) -> None:
    cache.clear()
    root, alice = make_user("root", superuser=True), make_user("alice")
    team = make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192, gpu=0)
    admin = Client()
    admin.force_login(root)

    published.clear()
    response = admin.post(
        f"/admin/tenancy/team/{team.pk}/change/",
        _change_form(team, cpu=32, memory_mb=131072, gpu=8, borrowing_limit_gpu=2),
    )
    assert response.status_code == 302, response.content.decode()[:3000]

    # The scheduler's next cycle: it was asked for, and reads the new quota from the model.
    assert events.QuotaChanged(team_id=team.pk) in published
    quota = Quota.objects.get(team=team)
    assert (quota.cpu, quota.memory_mb, quota.gpu, quota.borrowing_limit_gpu) == (32, 131072, 8, 2)

    # The API.
    api = APIClient()
    api.force_authenticate(alice)
    body = api.get("/api/v1/teams/recsys/quota/").json()
    assert (body["cpu"], body["memory_mb"], body["gpu"]) == (32, 131072, 8)
    assert body["borrowing_limit"]["gpu"] == 2
    assert body["priority_caps"] == [
        {"priority": "production", "cpu": None, "memory_mb": None, "gpu": 4}
    ]

    # `trainhub quota`.
    config = tmp_path / "cli.json"
    login(config, live_server.url, "alice", "pw-alice")
    shown = trainhub(config, "quota")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "Team recsys"
    assert next(x for x in lines if x.startswith("nominal quota")).split()[2:] == [
        "32",
        "131072",
        "8",
    ]
    assert next(x for x in lines if x.startswith("borrowing limit")).split()[2:] == [
        "unlimited",
        "unlimited",
        "2",
    ]
    assert next(x for x in lines if x.startswith("production")).split()[1:4] == [
        "cpu",
        "∞,",
        "mem",
    ]
    as_json = trainhub(config, "quota", "recsys", "--json")
    assert __import__("json").loads(as_json.stdout)["gpu"] == 8
    assert trainhub(config, "quota", "nope").returncode == 1

    # The audit log: who, when, before and after.
    entry = AuditEntry.objects.get(action="quota.update")
    assert entry.actor_name == "root" and entry.object_repr.startswith("quota of recsys")
    assert entry.before is not None and entry.after is not None
    assert (entry.before["cpu"], entry.after["cpu"]) == (4, 32)
    assert (entry.before["borrowing_limit_gpu"], entry.after["borrowing_limit_gpu"]) == (None, 2)
    assert AuditEntry.objects.filter(action="priority_caps.update").exists()
    log_page = admin.get("/admin/audit/auditentry/")
    assert log_page.status_code == 200 and b"quota.update" in log_page.content
    assert admin.get(f"/admin/audit/auditentry/{entry.pk}/delete/").status_code == 403


@pytest.mark.django_db
def test_admin_refuses_a_quota_below_what_production_jobs_hold(
    published: list[events.Event], django_capture_on_commit_callbacks: Any
) -> None:
    root, alice = make_user("root", superuser=True), make_user("alice")
    team = make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192)
    node, _ = make_node(cpus=8, memory_mb=16384)
    job = make_job(alice, priority="production")
    place_job(
        job=job,
        now=timezone.now(),
        placements=[
            Placement(TaskRole.COORDINATOR, 0, node.pk, None, 0.5, 512),
            Placement(TaskRole.PS, 0, node.pk, 41000, 0.5, 512),
            Placement(TaskRole.WORKER, 0, node.pk, 41001, 0.5, 512),
        ],
    )
    admin = Client()
    admin.force_login(root)
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(f"/admin/tenancy/team/{team.pk}/change/", _change_form(team, cpu=1))
    assert response.status_code == 200  # the form again, with the error
    assert b"production jobs hold cpu 1.5" in response.content
    assert Quota.objects.get(team=team).cpu == 4
    assert not AuditEntry.objects.filter(action="quota.update").exists()
    assert not [e for e in published if isinstance(e, events.QuotaChanged)]


@pytest.mark.django_db
def test_node_admin_actions_cordon_drain_uncordon() -> None:
    root = make_user("root", superuser=True)
    node, _ = make_node()
    admin = Client()
    admin.force_login(root)
    for action, state in (("cordon", "cordoned"), ("drain", "draining"), ("uncordon", "active")):
        response = admin.post(
            "/admin/nodes/node/", {"action": action, "_selected_action": [str(node.pk)]}
        )
        assert response.status_code == 302
        node.refresh_from_db()
        assert node.state == state
    assert AuditEntry.objects.filter(object_type="nodes.node").count() == 3


@pytest.mark.django_db
def test_node_owner_is_set_in_the_admin_and_audited() -> None:
    root = make_user("root", superuser=True)
    team = make_team("lab")
    node, _ = make_node()
    admin = Client()
    admin.force_login(root)
    assert admin.get(f"/admin/nodes/node/{node.pk}/change/").status_code == 200
    response = admin.post(f"/admin/nodes/node/{node.pk}/change/", {"owner": str(team.pk)})
    assert response.status_code == 302, response.content[:2000]
    node.refresh_from_db()
    assert node.owner == team
    entry = AuditEntry.objects.get(action="node.set_owner")
    assert (entry.before, entry.after) == ({"owner": None}, {"owner": "lab"})


@pytest.mark.django_db
def test_platform_admin_role_changes_in_the_user_admin_are_audited() -> None:
    root, bob = make_user("root", superuser=True), make_user("bob")
    admin = Client()
    admin.force_login(root)
    page = admin.get(f"/admin/auth/user/{bob.pk}/change/")
    assert page.status_code == 200
    form = {
        "username": "bob",
        "password": bob.password,
        "is_active": "on",
        "is_staff": "on",
        "is_superuser": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
    }
    response = admin.post(f"/admin/auth/user/{bob.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    entry = AuditEntry.objects.get(action="user.roles")
    assert entry.actor_name == "root"
    assert entry.before == {"is_active": True, "is_staff": False, "is_superuser": False}
    assert entry.after == {"is_active": True, "is_staff": True, "is_superuser": True}
