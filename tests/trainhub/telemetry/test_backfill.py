"""The data migrations build, for what was stored before them, what ingest builds.

The migrations that read per-point rows (0002, 0003, 0006) run against the schema as it
was before 0006 (the per-point table), reached by migrating telemetry back to 0005."""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from trainhub.jobs.models import Task
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.codec import decode
from trainhub.telemetry.models import (
    JobTelemetry,
    LogLine,
    MetricChunk,
    MetricRollup,
    MetricSeries,
)
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 1, 2, tzinfo=UTC)
migration = importlib.import_module("trainhub.telemetry.migrations.0002_rollups")
offsets_migration = importlib.import_module(
    "trainhub.telemetry.migrations.0003_log_offsets_and_budgets"
)
BEFORE_CHUNKS = ("telemetry", "0005_progress")
CHUNKS = ("telemetry", "0006_metric_chunks")


@pytest.fixture
def before_chunks() -> Iterator[Apps]:
    """The models as of migration 0005 (points one row each); migrated forward after."""
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE_CHUNKS])
    yield executor.loader.project_state([BEFORE_CHUNKS]).apps
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def _forward() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([CHUNKS])


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


def test_backfill_and_conversion_to_chunks_match_ingest(before_chunks: Apps) -> None:
    """Points stored one row each get the rollups (0002) and, once converted (0006), the
    very chunks' points that ingest stores; the per-point table is gone after."""
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    old, new = make_job(alice), make_job(alice)
    rnd = random.Random(7)
    points = [
        (rnd.choice(["loss", "acc"]), rnd.randrange(-300, 70_000), rnd.uniform(-1, 1))
        for _ in range(9000)
    ]
    points += [("loss", 5, 1.0), ("loss", 5, 2.0)]  # a repeated step: the later one is last
    old_task = Task.objects.create(job=old, role="worker", index=0, cpu=0.5, memory_mb=512)
    new_task = Task.objects.create(job=new, role="worker", index=0, cpu=0.5, memory_mb=512)
    point = before_chunks.get_model("telemetry", "MetricPoint")
    point.objects.bulk_create(
        point(job_id=old.pk, task_id=old_task.pk, name=n, step=s, value=v, time=NOW)
        for n, s, v in points
    )
    migration.backfill(before_chunks, SimpleNamespace(connection=connection))
    _forward()
    assert "telemetry_metricpoint" not in connection.introspection.table_names()
    for i in range(0, len(points), 500):
        batch = points[i : i + 500]
        ingest_metrics(
            task=new_task,
            points=[{"step": s, "values": {n: v}} for n, s, v in batch],
            now=NOW,
        )
    assert _state(old.pk) == _state(new.pk)
    assert _state(old.pk)[1][1][3] > 4096  # loss: more than one chunk
    converted = [(n, s, v, t, task) for _, task, n, s, v, t in stored_points([old.pk])]
    ingested = [(n, s, v, t, task) for _, task, n, s, v, t in stored_points([new.pk])]
    # (Points of one step from different batches may come back in another order.)
    assert sorted(p[:4] for p in converted) == sorted(p[:4] for p in ingested)
    assert sorted(p[:3] for p in converted) == sorted((n, s, v) for n, s, v in points)
    assert {p[4] for p in converted} == {old_task.pk}
    for chunk in MetricChunk.objects.filter(job_id=old.pk):  # each chunk's summary is true
        columns = decode(chunk.data)
        assert np.all(np.diff(columns.steps) >= 0)
        assert (chunk.first_step, chunk.last_step, chunk.count) == (
            columns.steps[0],
            columns.steps[-1],
            len(columns),
        )
        assert chunk.first_time == chunk.last_time == NOW


def test_offsets_and_budget_rows_backfill_matches_ingest(before_chunks: Apps) -> None:
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
    point = before_chunks.get_model("telemetry", "MetricPoint")
    for name, value in (("a", 1.0), ("b", 2.0)):  # as ingest stored a step of two values
        point.objects.create(
            job_id=job.pk, task_id=worker.pk, name=name, step=1, value=value, time=NOW
        )
    offsets = list(LogLine.objects.order_by("id").values_list("offset", flat=True))
    usage = [
        (job_id, 2, log_bytes)
        for job_id, log_bytes in JobTelemetry.objects.order_by("job_id").values_list(
            "job_id", "log_bytes"
        )
    ]
    assert offsets.count(0) == 2 and usage[0][2] > 0
    LogLine.objects.update(offset=0)
    JobTelemetry.objects.all().delete()
    offsets_migration.backfill(before_chunks, SimpleNamespace(connection=connection))
    assert list(LogLine.objects.order_by("id").values_list("offset", flat=True)) == offsets
    assert (
        list(JobTelemetry.objects.order_by("job_id").values_list("job_id", "points", "log_bytes"))
        == usage
    )
    assert not JobTelemetry.objects.filter(pk=quiet.pk).exists()
