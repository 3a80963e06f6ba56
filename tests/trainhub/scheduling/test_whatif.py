"""Quota what-if: a history recorded by the real platform (`history_driver`) replayed
through the simulator. With the quotas unchanged it reproduces the actual waits; with
changed quotas it moves them the way the change says."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.scheduling.whatif import QuotaChange, Scenario, WhatIfError, what_if

from .history_driver import PLAN, record_history


@pytest.fixture
def history(db: Any) -> dict[str, list[float]]:
    return record_history(timezone.now() - timedelta(hours=6))


def test_unchanged_quotas_reproduce_the_actual_waits(history: dict[str, list[float]]) -> None:
    result = what_if(timezone.now(), 1, Scenario())
    assert result.jobs == len(PLAN) and result.never_ran == 0
    rows = {row.team: row for row in result.teams}
    for team, waits in history.items():
        actual = sum(waits) / len(waits)
        assert actual > 0, "the recorded history should make both teams wait"
        assert rows[team].actual.wait_s == pytest.approx(actual)
        print(f"{team}: actual wait {actual:.0f} s, replay {rows[team].replay.wait_s:.0f} s")
        assert rows[team].replay.wait_s == pytest.approx(actual, rel=0.10)
        assert rows[team].whatif == rows[team].replay
        assert rows[team].actual.jobs == len(waits)
    # Usage: both count CPU-hours held while running.
    for row in rows.values():
        assert row.replay.cpu_hours == pytest.approx(row.actual.cpu_hours, rel=0.10)


def test_moving_quota_to_a_team_shortens_its_waits(history: dict[str, list[float]]) -> None:
    scenario = Scenario(
        quotas={
            "alpha": QuotaChange(nominal={"cpu": 3}),
            "beta": QuotaChange(nominal={"cpu": 5}),
        }
    )
    rows = {row.team: row for row in what_if(timezone.now(), 1, scenario).teams}
    assert rows["beta"].whatif.wait_s < rows["beta"].replay.wait_s
    assert rows["alpha"].whatif.wait_s > rows["alpha"].replay.wait_s
    assert rows["alpha"].actual == rows["alpha"].actual  # the history itself is unchanged
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == len(PLAN)


def test_a_quota_too_small_for_a_job_leaves_it_unstarted(history: dict[str, list[float]]) -> None:
    scenario = Scenario(quotas={"alpha": QuotaChange(nominal={"cpu": 2})})
    rows = {row.team: row for row in what_if(timezone.now(), 1, scenario).teams}
    two_workers = sum(1 for _, team, workers, *_ in PLAN if team == "alpha" and workers == 2)
    assert rows["alpha"].whatif.never_started == two_workers


def test_unknown_team_and_policy_are_named(history: dict[str, list[float]]) -> None:
    with pytest.raises(WhatIfError) as unknown:
        what_if(timezone.now(), 1, Scenario(quotas={"gamma": QuotaChange()}))
    assert unknown.value.field == "quotas" and "gamma" in str(unknown.value)
    with pytest.raises(WhatIfError) as bad:
        what_if(timezone.now(), 1, Scenario(policy="lottery"))
    assert bad.value.field == "policy"


def test_jobs_before_the_window_are_left_out(history: dict[str, list[float]]) -> None:
    assert what_if(timezone.now(), 0.1, Scenario()).jobs == 0
