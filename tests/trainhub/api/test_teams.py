"""`PATCH /api/v1/teams/{slug}/`: platform admins rename, deactivate and reactivate a team
through the services the team page calls; their refusals come back naming the field and
change nothing."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Quota, Team

from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> dict[str, Any]:
    """root: platform admin; alice: admin of recsys (4 CPUs); bob: in no team."""
    root, alice, bob = make_user("root", superuser=True), make_user("alice"), make_user("bob")
    make_team("recsys", members={alice: Role.ADMIN}, cpu=4, memory_mb=8192)
    make_node(cpus=8, memory_mb=32768)
    clients = {}
    for user in (root, alice, bob):
        clients[user.username] = APIClient()
        clients[user.username].force_authenticate(user)
    return {"alice": alice, **{f"as_{name}": client for name, client in clients.items()}}


def _team() -> Team:
    return Team.objects.select_related("quota").get(slug="recsys")


def test_a_platform_admin_deactivates_and_reactivates_a_team(world: dict[str, Any]) -> None:
    admin = world["as_root"]
    assert admin.get("/api/v1/teams/recsys/").json()["is_active"] is True

    off = admin.patch("/api/v1/teams/recsys/", {"is_active": False}, format="json")
    assert off.status_code == 200, off.content
    assert off.json()["is_active"] is False
    team = _team()
    assert not team.is_active
    assert (team.quota.cpu, team.quota.memory_mb) == (0, 0)  # as the page's deactivation
    assert AuditEntry.objects.filter(
        action="team.update", before={"is_active": True}, after={"is_active": False}
    ).exists()
    [listed] = world["as_alice"].get("/api/v1/teams/").json()["results"]
    assert listed["is_active"] is False

    on = admin.patch("/api/v1/teams/recsys/", {"is_active": True}, format="json")
    assert on.status_code == 200 and on.json()["is_active"] is True
    team = _team()
    assert team.is_active and team.quota.cpu == 0  # its quota stays zero until set again


def test_a_team_with_active_jobs_is_not_deactivated_and_nothing_changes(
    world: dict[str, Any],
) -> None:
    make_job(world["alice"], team="recsys")
    audited = AuditEntry.objects.count()

    refused = world["as_root"].patch(
        "/api/v1/teams/recsys/", {"is_active": False, "name": "Renamed"}, format="json"
    )

    assert refused.status_code == 409
    assert refused.json() == {
        "is_active": ["The team has 1 active job; cancel them or let them end first."]
    }
    team = _team()
    assert team.is_active and team.name == "Recsys"
    assert (team.quota.cpu, team.quota.memory_mb) == (4, 8192)
    assert AuditEntry.objects.count() == audited


def test_a_platform_admin_renames_a_team(world: dict[str, Any]) -> None:
    renamed = world["as_root"].patch(
        "/api/v1/teams/recsys/", {"name": "Recommendations"}, format="json"
    )
    assert renamed.status_code == 200
    assert renamed.json()["name"] == "Recommendations" and renamed.json()["is_active"] is True
    assert _team().name == "Recommendations"
    assert AuditEntry.objects.filter(
        action="team.update", before={"name": "Recsys"}, after={"name": "Recommendations"}
    ).exists()


def test_only_platform_admins_change_a_team(world: dict[str, Any]) -> None:
    audited = AuditEntry.objects.count()
    for body in ({"is_active": False}, {"name": "Mine now"}):
        # A team admin may see the team, not change it; another user does not see it.
        by_team_admin = world["as_alice"].patch("/api/v1/teams/recsys/", body, format="json")
        assert by_team_admin.status_code == 403
        assert "Only platform admins" in by_team_admin.json()["detail"]
        by_outsider = world["as_bob"].patch("/api/v1/teams/recsys/", body, format="json")
        assert by_outsider.status_code == 404
    team = _team()
    assert team.is_active and team.name == "Recsys"
    assert AuditEntry.objects.count() == audited


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"slug": "x"}, "slug", "A team's slug cannot be changed; only name and is_active can."),
        ({"is_active": "no"}, "is_active", "Expected true or false."),
        ({"name": ""}, "name", "This field may not be blank."),
        ({"quota": 1}, "quota", "Unknown field 'quota'."),
    ],
)
def test_a_change_that_cannot_be_made_is_refused_naming_the_field(
    world: dict[str, Any], body: dict[str, Any], field: str, message: str
) -> None:
    refused = world["as_root"].patch("/api/v1/teams/recsys/", body, format="json")
    assert refused.status_code == 400
    assert refused.json()[field] == [message]
    assert Team.objects.filter(slug="recsys", name="Recsys", is_active=True).exists()
    assert Quota.objects.get(team__slug="recsys").cpu == 4
