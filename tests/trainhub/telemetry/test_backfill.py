"""The rollups migration builds, for points stored before it, what ingest builds."""

from __future__ import annotations

import importlib
import random
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from trainhub.jobs.models import Task
from trainhub.telemetry.models import MetricPoint, MetricRollup, MetricSeries
from trainhub.telemetry.services import ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 2, tzinfo=UTC)
migration = importlib.import_module("trainhub.telemetry.migrations.0002_rollups")


def _state(job_id: int) -> tuple[list[Any], list[Any]]:
    rollups = MetricRollup.objects.filter(job_id=job_id).order_by("name", "level", "block")
    series = MetricSeries.objects.filter(job_id=job_id).order_by("name")
    return (
        list(
            rollups.values_list(
                "name",
                "level",
                "block",
                "min_value",
                "max_value",
                "count",
                "last_step",
                "last_value",
            )
        ),
        list(series.values_list("name", "first_step", "last_step", "count")),
    )


def test_backfill_matches_ingest() -> None:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    old, new = make_job(alice), make_job(alice)
    rnd = random.Random(7)
    points = [
        (rnd.choice(["loss", "acc"]), rnd.randrange(-300, 70_000), rnd.uniform(-1, 1))
        for _ in range(3000)
    ]
    points += [("loss", 5, 1.0), ("loss", 5, 2.0)]  # a repeated step: the later one is last
    old_task = Task.objects.create(job=old, role="worker", index=0, cpu=0.5, memory_mb=512)
    new_task = Task.objects.create(job=new, role="worker", index=0, cpu=0.5, memory_mb=512)
    MetricPoint.objects.bulk_create(
        MetricPoint(job=old, task=old_task, name=n, step=s, value=v, time=NOW) for n, s, v in points
    )
    migration.backfill(apps, SimpleNamespace(connection=connection))
    for i in range(0, len(points), 500):
        batch = points[i : i + 500]
        ingest_metrics(
            task=new_task,
            points=[{"step": s, "values": {n: v}} for n, s, v in batch],
            now=NOW,
        )
    assert _state(old.pk) == _state(new.pk)
    assert _state(old.pk)[1][1][3] > 1000
