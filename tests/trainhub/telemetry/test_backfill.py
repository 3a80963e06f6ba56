"""The data migrations build, for what was stored before them, what ingest builds.

The migrations that read per-point rows (0002, 0003, 0006) run against the schema as it
was before 0006 (the per-point table), reached by migrating telemetry back to 0005; the
one that reads per-line log rows (0007) against the schema before it (0006)."""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
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
from trainhub.telemetry.logchunks import CHUNK_LINES, stored_lines
from trainhub.telemetry.models import (
    JobTelemetry,
    LogChunk,
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
log_migration = importlib.import_module("trainhub.telemetry.migrations.0007_log_chunks")
BEFORE_CHUNKS = ("telemetry", "0005_progress")
CHUNKS = ("telemetry", "0006_metric_chunks")
LOG_CHUNKS = ("telemetry", "0007_log_chunks")


def _migrate(target: tuple[str, str]) -> Apps:
    """Migrate telemetry to `target`; the models as of it."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.fixture
def to_latest() -> Iterator[None]:
    """Whatever the test migrated to, the database is migrated forward after it."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture
def before_chunks(to_latest: None) -> Apps:
    """The models as of migration 0005 (points one row each); migrated forward after."""
    return _migrate(BEFORE_CHUNKS)


def _forward() -> None:
    _migrate(CHUNKS)


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


def test_offsets_and_budget_rows_backfill_matches_ingest(to_latest: None) -> None:
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
    offsets = [line.offset for line in stored_lines()]
    usage = [
        (job_id, 2, log_bytes)
        for job_id, log_bytes in JobTelemetry.objects.order_by("job_id").values_list(
            "job_id", "log_bytes"
        )
    ]
    before_chunks = _migrate(BEFORE_CHUNKS)  # the lines one row each again (0007 reversed)
    point = before_chunks.get_model("telemetry", "MetricPoint")
    for name, value in (("a", 1.0), ("b", 2.0)):  # as ingest stored a step of two values
        point.objects.create(
            job_id=job.pk, task_id=worker.pk, name=name, step=1, value=value, time=NOW
        )
    line = before_chunks.get_model("telemetry", "LogLine")
    assert offsets.count(0) == 2 and usage[0][2] > 0
    line.objects.update(offset=0)
    JobTelemetry.objects.all().delete()
    offsets_migration.backfill(before_chunks, SimpleNamespace(connection=connection))
    assert list(line.objects.order_by("id").values_list("offset", flat=True)) == offsets
    assert (
        list(JobTelemetry.objects.order_by("job_id").values_list("job_id", "points", "log_bytes"))
        == usage
    )
    assert not JobTelemetry.objects.filter(pk=quiet.pk).exists()


# Batches as ingest stored them one row per line: (task, stream, lines, seconds after NOW).
def _batches(worker: Task, ps: Task) -> list[tuple[Task, str, list[str], int]]:
    return [
        (worker, "stdout", ["héllo €", "epoch 1"], 0),  # offsets count bytes
        (ps, "stderr", ["ps up"], 0),
        (worker, "stdout", [f"line {i}" for i in range(CHUNK_LINES + 10)], 1),  # 2 chunks
        (worker, "stdout", ["next second"], 2),  # same task and stream: a chunk of its own
        (worker, "stderr", ["", "Traceback", "a\nb"], 2),  # a stored newline: two lines
        (ps, "stderr", ["ps down"], 3),
    ]


def test_log_lines_become_the_chunks_ingest_stores_and_back(
    to_latest: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 0007 makes each ingest's rows (consecutive, one task, stream and time)
    chunks of at most CHUNK_LINES lines with their offsets: the chunks and lines ingest
    stores; reversed, the rows are those it read."""
    monkeypatch.setattr(log_migration, "WRITE_BATCH", 2)  # chunks written a few at a time
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    old, new = make_job(alice), make_job(alice)
    tasks = {
        job.pk: (
            Task.objects.create(job=job, role="worker", index=0, cpu=0.5, memory_mb=512),
            Task.objects.create(job=job, role="ps", index=0, cpu=0.5, memory_mb=512),
        )
        for job in (old, new)
    }
    before = _migrate(CHUNKS)
    line = before.get_model("telemetry", "LogLine")
    offsets: dict[int, int] = {}
    for task, stream, lines, seconds in _batches(*tasks[old.pk]):
        for text in lines:
            at = offsets.get(task.pk, 0)
            offsets[task.pk] = at + len(text.encode()) + 1
            line.objects.create(
                job_id=old.pk,
                task_id=task.pk,
                source=f"{task.role}-{task.index}",
                stream=stream,
                offset=at,
                line=text,
                time=NOW + timedelta(seconds=seconds),
            )
    rows = list(
        line.objects.order_by("id").values_list(
            "job_id", "task_id", "source", "stream", "offset", "line", "time"
        )
    )
    _migrate(LOG_CHUNKS)
    assert "telemetry_logline" not in connection.introspection.table_names()
    for task, stream, lines, seconds in _batches(*tasks[new.pk]):
        ingest_logs(task=task, stream=stream, lines=lines, now=NOW + timedelta(seconds=seconds))

    def chunks(job_id: int) -> list[tuple[Any, ...]]:
        found = LogChunk.objects.filter(job_id=job_id).order_by("id")
        return list(found.values_list("source", "stream", "offset", "end_offset", "count", "time"))

    def lines_of(job_id: int) -> list[tuple[Any, ...]]:
        found = stored_lines(LogChunk.objects.filter(job_id=job_id))
        return [(x.source, x.stream, x.offset, x.line, x.time) for x in found]

    assert chunks(old.pk) == chunks(new.pk)
    assert len(chunks(old.pk)) == 7
    assert lines_of(old.pk) == lines_of(new.pk)
    old_worker, old_ps = tasks[old.pk]
    assert {x.task for x in stored_lines(LogChunk.objects.filter(job_id=old.pk))} == {
        old_worker.pk,
        old_ps.pk,
    }
    # Every row as it was but the one holding a newline, which is now two lines.
    converted = [
        (old.pk, x.task, x.source, x.stream, x.offset, x.line, x.time)
        for x in stored_lines(LogChunk.objects.filter(job_id=old.pk))
    ]
    assert [r for r in converted if r[5] not in ("a", "b")] == [r for r in rows if r[5] != "a\nb"]
    [(at, _), (after, _)] = [r[4:6] for r in converted if r[5] in ("a", "b")]
    assert after == at + 2
    LogChunk.objects.filter(job_id=new.pk).delete()
    line = _migrate(CHUNKS).get_model("telemetry", "LogLine")
    back = line.objects.order_by("id").values_list(
        "job_id", "task_id", "source", "stream", "offset", "line", "time"
    )
    assert list(back) == converted
