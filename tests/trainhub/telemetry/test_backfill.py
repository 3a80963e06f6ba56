"""The data migrations build, for what was stored before them, what ingest builds."""

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
from trainhub.telemetry.models import (
    JobTelemetry,
    LogLine,
    MetricPoint,
    MetricRollup,
    MetricSeries,
)
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 2, tzinfo=UTC)
migration = importlib.import_module("trainhub.telemetry.migrations.0002_rollups")
offsets_migration = importlib.import_module(
    "trainhub.telemetry.migrations.0003_log_offsets_and_budgets"
)


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


def test_offsets_and_budget_rows_backfill_matches_ingest() -> None:
    """Migration 0003 gives the lines stored before offsets existed the offsets ingest
    gives, and each job its row of what it stored."""
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    job, quiet = make_job(alice), make_job(alice)
    worker = Task.objects.create(job=job, role="worker", index=0, cpu=0.5, memory_mb=512)
    ps = Task.objects.create(job=job, role="ps", index=0, cpu=0.5, memory_mb=512)
    for i in range(6):
        task = ps if i % 3 == 0 else worker
        lines = [f"{task.role} {i} é{'x' * j}" for j in range(i + 1)]
        ingest_logs(task=task, stream="stdout", lines=lines, now=NOW)
    ingest_metrics(task=worker, points=[{"step": 1, "values": {"a": 1, "b": 2}}], now=NOW)
    offsets = list(LogLine.objects.order_by("id").values_list("offset", flat=True))
    usage = list(
        JobTelemetry.objects.order_by("job_id").values_list("job_id", "points", "log_bytes")
    )
    assert offsets.count(0) == 2 and usage[0][2] > 0
    LogLine.objects.update(offset=0)
    JobTelemetry.objects.all().delete()
    offsets_migration.backfill(apps, SimpleNamespace(connection=connection))
    assert list(LogLine.objects.order_by("id").values_list("offset", flat=True)) == offsets
    assert (
        list(JobTelemetry.objects.order_by("job_id").values_list("job_id", "points", "log_bytes"))
        == usage
    )
    assert not JobTelemetry.objects.filter(pk=quiet.pk).exists()
