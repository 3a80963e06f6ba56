"""Per-job budgets: points and log bytes beyond them are not stored, and are counted.

The counts show in the metrics and logs answers of the API (and on the job page,
tests/trainhub/web). Concurrent batches of one job are charged one after another, so
exactly the budget is stored.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient
from trainhub.jobs.models import Job, Task
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.logchunks import stored_lines
from trainhub.telemetry.models import JobTelemetry, LogChunk, MetricSeries
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ...conftest import skip_outside_ci
from ..factories import make_job, make_team, make_user

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _task(job: Job, index: int = 0) -> Task:
    return Task.objects.create(job=job, role="worker", index=index, cpu=0.5, memory_mb=512)


@pytest.fixture
def task(db: Any) -> Task:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    return _task(make_job(alice))


def _steps(**filters: Any) -> list[int]:
    job_id = filters["job_id"]
    return sorted(step for _, _, _, step, _, _ in stored_points([job_id]))


def _usage(task: Task) -> JobTelemetry:
    return JobTelemetry.objects.get(pk=task.job_id)


def _api(task: Task, path: str) -> dict[str, Any]:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="alice"))
    response = client.get(f"/api/v1/jobs/{task.job_id}/{path}")
    assert response.status_code == 200
    return dict(response.json())


@override_settings(TELEMETRY_METRIC_POINTS_PER_JOB=5)
def test_points_beyond_the_budget_are_dropped_and_counted(task: Task) -> None:
    ingest_metrics(
        task=task, points=[{"step": s, "values": {"loss": s}} for s in range(3)], now=NOW
    )
    kept = ingest_metrics(
        task=task,
        points=[{"step": s, "values": {"loss": s, "acc": -s}} for s in range(3, 5)],
        now=NOW,
    )
    # The batch's first values fit; the rest are counted, not stored.
    assert [(p["name"], p["step"]) for p in kept] == [("loss", 3), ("acc", 3)]
    assert _steps(job_id=task.job_id) == [0, 1, 2, 3, 3]
    usage = _usage(task)
    assert (usage.points, usage.points_dropped) == (5, 2)
    assert ingest_metrics(task=task, points=[{"step": 9, "values": {"x": 1}}], now=NOW) == []
    assert _usage(task).points_dropped == 3
    # Rollups only count what was stored.
    series = dict(MetricSeries.objects.values_list("name", "count"))
    assert series == {"loss": 4, "acc": 1}
    assert _api(task, "metrics/?max_points=10")["points_dropped"] == 3
    assert _api(task, "metrics/")["points_dropped"] == 3
    # Another job has a budget of its own.
    other = _task(make_job(User.objects.get(username="alice")))
    ingest_metrics(task=other, points=[{"step": 1, "values": {"loss": 1}}], now=NOW)
    assert _steps(job_id=other.job_id) == [1]
    assert _api(other, "metrics/?max_points=10")["points_dropped"] == 0


@override_settings(TELEMETRY_LOG_BYTES_PER_JOB=20)
def test_log_lines_beyond_the_budget_are_dropped_and_counted_cut_at_one_place(
    task: Task,
) -> None:
    # Each line costs its UTF-8 bytes and a newline: 6 + 7 = 13, then 9 would make 22.
    stored = ingest_logs(task=task, stream="stdout", lines=["first", "héllo", "too long"], now=NOW)
    assert [line["line"] for line in stored] == ["first", "héllo"]
    # A short line after the cut is dropped too: the stored log has no holes.
    assert ingest_logs(task=task, stream="stderr", lines=["ok"], now=NOW) == []
    assert [x.line for x in stored_lines()] == [
        "first",
        "héllo",
    ]
    usage = _usage(task)
    assert (usage.log_bytes, usage.log_lines_dropped, usage.log_bytes_dropped) == (13, 2, 12)
    body = _api(task, "logs/?tail=10")
    assert (body["log_lines_dropped"], body["log_bytes_dropped"]) == (2, 12)


@pytest.mark.django_db(transaction=True)
@override_settings(TELEMETRY_METRIC_POINTS_PER_JOB=1000, TELEMETRY_LOG_BYTES_PER_JOB=6000)
def test_concurrent_batches_of_one_job_store_exactly_the_budget() -> None:
    if connection.vendor != "postgresql":
        skip_outside_ci("row locks across connections: PostgreSQL")
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    job = make_job(alice)
    tasks = [_task(job, i) for i in range(4)]
    errors: list[BaseException] = []

    def report(task: Task) -> None:
        try:
            for batch in range(10):
                points = [{"step": batch * 100 + s, "values": {"v": s}} for s in range(40)]
                ingest_metrics(task=task, points=points, now=NOW)
                ingest_logs(task=task, stream="stdout", lines=["x" * 99] * 5, now=NOW)
        except BaseException as error:  # surfaced below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=report, args=(t,)) for t in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    usage = JobTelemetry.objects.get(pk=job.pk)
    assert len(stored_points([job.pk])) == usage.points == 1000
    assert usage.points_dropped == 4 * 10 * 40 - 1000
    assert len(stored_lines(LogChunk.objects.filter(job=job))) == 60  # 100-byte lines
    assert (usage.log_bytes, usage.log_lines_dropped) == (6000, 4 * 10 * 5 - 60)
    # Each task's offsets follow its own stored lines.
    for t in tasks:
        offsets = [x.offset for x in stored_lines(LogChunk.objects.filter(task=t))]
        assert offsets == [100 * i for i in range(len(offsets))]
