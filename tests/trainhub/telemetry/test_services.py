"""Storing reported metric points and log lines, and reading them back (telemetry).

A batch from an agent is never refused whole: the points and lines that cannot be stored
are skipped (or cut) and the rest are kept.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from trainhub.jobs.models import Job, Task
from trainhub.scheduling.services import run_cycle
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.logchunks import stored_lines
from trainhub.telemetry.models import LogChunk
from trainhub.telemetry.selectors import log_lines, metric_series
from trainhub.telemetry.services import MAX_LINE_CHARS, ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def worker() -> Task:
    """Worker 0 of a placed job."""
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    make_node()
    job = make_job(alice, workers={"min": 1, "max": 1, "resources": {"cpu": 0.5}})
    run_cycle(now=timezone.now())
    return job.tasks.get(role="worker", index=0)


def _points(task: Task) -> list[tuple[str, int, float]]:
    return [(n, s, v) for _, t, n, s, v, _ in stored_points([task.job_id]) if t == task.pk]


def test_points_are_stored_one_row_per_value(worker: Task) -> None:
    ingest_metrics(
        task=worker,
        points=[
            {"step": 1, "time": "2026-01-02T03:00:00+00:00", "values": {"loss": 0.9, "acc": 1}},
            {"step": 2, "values": {"loss": 0.5}},
        ],
        now=NOW,
    )
    assert _points(worker) == [("acc", 1, 1.0), ("loss", 1, 0.9), ("loss", 2, 0.5)]
    times = {s: t for _, _, n, s, _, t in stored_points() if n == "loss"}
    assert times[1] == datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
    assert times[2] == NOW  # no time reported: the time it arrived


@pytest.mark.parametrize(
    "point",
    [
        {"step": 1, "values": {"loss": float("nan")}},
        {"step": 1, "values": {"loss": float("inf")}},
        {"step": 1, "values": {"loss": float("-inf")}},
        {"step": 1, "values": {"loss": "0.5"}},
        {"step": 1, "values": {"loss": None}},
        {"step": 1, "values": {"loss": True}},
        {"step": 1, "values": {"x" * 101: 0.5}},
        {"step": 1, "values": {7: 0.5}},
        {"step": "1", "values": {"loss": 0.5}},
        {"step": 1.0, "values": {"loss": 0.5}},
        {"values": {"loss": 0.5}},
        {"step": 1, "values": [0.5]},
        {"step": 1},
    ],
)
def test_a_point_that_cannot_be_stored_is_skipped_and_the_rest_kept(
    worker: Task, point: dict[str, Any]
) -> None:
    ingest_metrics(task=worker, points=[point, {"step": 9, "values": {"ok": 1.5}}], now=NOW)
    assert _points(worker) == [("ok", 9, 1.5)]


def test_a_name_of_a_hundred_characters_is_kept(worker: Task) -> None:
    ingest_metrics(task=worker, points=[{"step": 0, "values": {"n" * 100: 2}}], now=NOW)
    assert _points(worker) == [("n" * 100, 0, 2.0)]


def test_a_time_without_a_zone_or_not_a_time_reads_as_now(worker: Task) -> None:
    ingest_metrics(
        task=worker,
        points=[
            {"step": 1, "time": "2026-01-01T00:00:00", "values": {"a": 1}},
            {"step": 2, "time": "yesterday", "values": {"a": 2}},
            {"step": 3, "time": 12345, "values": {"a": 3}},
        ],
        now=NOW,
    )
    assert {t for *_, t in stored_points()} == {NOW}


def test_log_lines_are_stored_with_their_source_and_stream(worker: Task) -> None:
    ingest_logs(task=worker, stream="stderr", lines=["epoch 1", "epoch 2", 42], now=NOW)
    rows = [(x.source, x.stream, x.line, x.time) for x in stored_lines()]
    assert rows == [
        ("worker-0", "stderr", "epoch 1", NOW),
        ("worker-0", "stderr", "epoch 2", NOW),
        ("worker-0", "stderr", "42", NOW),
    ]
    assert set(LogChunk.objects.values_list("job_id", "task_id")) == {(worker.job_id, worker.pk)}


def test_an_over_long_line_and_stream_name_are_cut(worker: Task) -> None:
    ingest_logs(task=worker, stream="stdout-and-more", lines=["y" * (MAX_LINE_CHARS + 50)], now=NOW)
    [row] = stored_lines()
    assert row.line == "y" * MAX_LINE_CHARS
    assert row.stream == "stdout-a"


def test_no_lines_store_nothing(worker: Task) -> None:
    ingest_logs(task=worker, stream="stdout", lines=[], now=NOW)
    ingest_metrics(task=worker, points=[], now=NOW)
    assert not LogChunk.objects.exists() and not stored_points()


def test_metric_series_groups_by_name_in_step_order(worker: Task) -> None:
    ingest_metrics(
        task=worker,
        points=[
            {"step": 3, "values": {"loss": 0.3}},
            {"step": 1, "values": {"loss": 0.9, "lr": 0.1}},
            {"step": 2, "values": {"loss": 0.5}},
        ],
        now=NOW,
    )
    job = Job.objects.get(pk=worker.job_id)
    series = metric_series(job)
    assert sorted(series) == ["loss", "lr"]
    assert [(p["step"], p["value"]) for p in series["loss"]] == [(1, 0.9), (2, 0.5), (3, 0.3)]
    assert series["lr"] == [{"step": 1, "value": 0.1, "time": NOW.isoformat()}]
    assert list(metric_series(job, ["lr"])) == ["lr"]
    assert metric_series(job, ["missing"]) == {}


def test_metric_series_and_log_lines_read_only_their_job(worker: Task) -> None:
    other = make_job(User.objects.get(username="alice"), name="other")
    ingest_metrics(task=worker, points=[{"step": 1, "values": {"loss": 1}}], now=NOW)
    ingest_logs(task=worker, stream="stdout", lines=["mine"], now=NOW)
    assert metric_series(other) == {} and log_lines(other) == []


def test_log_lines_page_after_an_id(worker: Task) -> None:
    ingest_logs(task=worker, stream="stdout", lines=[f"line {i}" for i in range(5)], now=NOW)
    job = Job.objects.get(pk=worker.job_id)
    everything = log_lines(job)
    assert [x["line"] for x in everything] == [f"line {i}" for i in range(5)]
    assert everything[0] == {
        "id": everything[0]["id"],
        "task": worker.pk,
        "source": "worker-0",
        "stream": "stdout",
        "offset": 0,
        "line": "line 0",
        "time": NOW.isoformat(),
    }
    after_second = log_lines(job, after_id=everything[1]["id"], limit=2)
    assert [x["line"] for x in after_second] == ["line 2", "line 3"]
    assert log_lines(job, after_id=everything[-1]["id"]) == []


def test_later_ingests_keep_earlier_rows(worker: Task) -> None:
    ingest_metrics(task=worker, points=[{"step": 1, "values": {"loss": 1}}], now=NOW)
    later = NOW + timedelta(seconds=5)
    ingest_metrics(task=worker, points=[{"step": 2, "values": {"loss": 0.5}}], now=later)
    assert _points(worker) == [("loss", 1, 1.0), ("loss", 2, 0.5)]
