"""`trainhub whatif` run as a process against a live server with a recorded history."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from ..scheduling.history_driver import PLAN, record_history
from .helpers import login, trainhub

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ann(live_server: Any, tmp_path: Path) -> Path:
    record_history(timezone.now() - timedelta(hours=6))  # ann administers team alpha
    config = tmp_path / "cli.json"
    login(config, live_server.url, "ann", "pw-ann")
    return config


def test_whatif_prints_each_team_beside_its_history(ann: Path) -> None:
    done = trainhub(ann, "whatif", "--days", "1", "--quota", "alpha:cpu=8")
    assert done.returncode == 0, done.stderr
    assert f"{len(PLAN)} jobs submitted" in done.stdout
    lines = done.stdout.splitlines()
    assert lines[1].split()[:3] == ["TEAM", "JOBS", "WAIT"]
    assert lines[2].startswith("alpha") and lines[3].startswith("(other teams)")
    answer = json.loads(trainhub(ann, "whatif", "--days", "1", "--json").stdout)
    alpha = next(row for row in answer["teams"] if row["team"] == "alpha")
    assert alpha["change"]["wait_s"] == 0  # nothing changed


def test_whatif_names_bad_input_and_refusals(ann: Path) -> None:
    usage = trainhub(ann, "whatif", "--quota", "alpha-cpu=8")
    assert usage.returncode == 2 and "TEAM:RES=N" in usage.stderr
    refused = trainhub(ann, "whatif", "--quota", "beta:cpu=8")
    assert refused.returncode == 1 and "team admins" in refused.stderr
    unknown = trainhub(ann, "whatif", "--policy", "lottery")
    assert unknown.returncode == 1 and "policy" in unknown.stderr
