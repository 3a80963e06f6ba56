"""Writing chunks, series and rollups in one statement (`telemetry/storing.py`): names
and numbers pass through the array literals exactly."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from trainhub.jobs.models import Task
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.models import MetricRollup, MetricSeries
from trainhub.telemetry.services import write_points
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db
WHEN = datetime(2026, 3, 1, 12, 0, 0, 654321, tzinfo=UTC)

NAMES = ['a"b', "back\\slash", "comma,{brace}", "NULL", " spaced ", "ünïcode/λ", "x'y"]
VALUES = [
    1e-300,
    -0.0,
    sys.float_info.max,
    5e-324,
    0.1 + 0.2,
    -123456789.123456789,
    2.0**53 + 1,
]


@pytest.fixture
def task(db: Any) -> Task:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    return Task.objects.create(job=make_job(alice), role="worker", index=0, cpu=0.5, memory_mb=512)


def test_names_values_steps_and_times_are_stored_exactly(task: Task) -> None:
    steps = [0, 7, 2**40, 2**62]
    rows = [
        (name, step, value) for name, value in zip(NAMES, VALUES, strict=True) for step in steps
    ]
    write_points(task.job_id, rows, task_id=task.pk, time=WHEN)
    stored = {(name, step): (value, when, t) for _, t, name, step, value, when in stored_points()}
    assert stored == {(n, s): (v, WHEN, task.pk) for n, s, v in rows}
    series = {s.name: (s.first_step, s.last_step, s.count) for s in MetricSeries.objects.all()}
    assert series == {name: (0, 2**62, 4) for name in NAMES}
    top = {
        r.name: (r.min_value, r.max_value, r.last_value)
        for r in MetricRollup.objects.filter(level=8, block=2**62 >> 32)
    }
    assert top == {name: (value, value, value) for name, value in zip(NAMES, VALUES, strict=True)}
