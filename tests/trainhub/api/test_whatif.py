"""`POST /api/v1/whatif/`: who may ask, what they see, and bad input named and harmless."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.jobs.models import Job, JobEvent
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Quota, Team
from trainhub.tenancy.services import add_member

from ..factories import make_user
from ..scheduling.history_driver import PLAN, record_history

URL = "/api/v1/whatif/"


@pytest.fixture
def world(db: Any) -> dict[str, Any]:
    record_history(timezone.now() - timedelta(hours=6))  # users ann (alpha) and ben (beta) admins
    viewer = make_user("vic")
    add_member(team=Team.objects.get(slug="alpha"), user=viewer, role=Role.VIEWER)
    return {"root": make_user("root", superuser=True)}


def _client(username: str) -> APIClient:
    from django.contrib.auth.models import User

    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def _state() -> tuple[int, int, list[tuple[float, int, int]]]:
    quotas = list(Quota.objects.order_by("pk").values_list("cpu", "memory_mb", "gpu"))
    return Job.objects.count(), JobEvent.objects.count(), quotas


def test_a_platform_admin_sees_every_team_side_by_side(world: dict[str, Any]) -> None:
    before = _state()
    body = {"days": 1, "quotas": [{"team": "beta", "cpu": 5}, {"team": "alpha", "cpu": 3}]}
    response = _client("root").post(URL, body, format="json")
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["jobs"] == len(PLAN) and data["policy"] == "cfs"
    rows = {row["team"]: row for row in data["teams"]}
    assert set(rows) == {"alpha", "beta"}
    beta = rows["beta"]
    assert beta["replay"]["wait_s"] == pytest.approx(beta["actual"]["wait_s"], rel=0.1)
    assert beta["change"]["wait_s"] == pytest.approx(
        beta["whatif"]["wait_s"] - beta["replay"]["wait_s"], abs=0.2
    )
    assert beta["change"]["wait_s"] < 0
    assert _state() == before  # nothing changed, nothing created


def test_a_team_admin_replays_their_own_quota_and_sees_others_pooled(
    world: dict[str, Any],
) -> None:
    response = _client("ann").post(
        URL, {"days": 1, "quotas": [{"team": "alpha", "cpu": 8}]}, format="json"
    )
    assert response.status_code == 200, response.content
    teams = [row["team"] for row in response.json()["teams"]]
    assert teams == ["alpha", "(other teams)"]


def test_a_team_admin_may_not_replay_another_teams_quota(world: dict[str, Any]) -> None:
    response = _client("ann").post(URL, {"quotas": [{"team": "beta", "cpu": 8}]}, format="json")
    assert response.status_code == 403


def test_viewers_and_anonymous_callers_are_refused(world: dict[str, Any]) -> None:
    assert _client("vic").post(URL, {}, format="json").status_code == 403
    assert APIClient().post(URL, {}, format="json").status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"days": 0}, "days"),
        ({"days": 1, "policy": "lottery"}, "policy"),
        ({"quotas": [{"team": "gamma", "cpu": 1}]}, "quotas"),
        ({"quotas": [{"team": "alpha", "cpus": 1}]}, "quotas"),
        ({"quotas": [{"team": "alpha"}, {"team": "alpha"}]}, "quotas"),
        ({"horizon": 3}, "horizon"),
    ],
)
def test_bad_input_is_named_and_changes_nothing(
    world: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    before = _state()
    response = _client("root").post(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert _state() == before
