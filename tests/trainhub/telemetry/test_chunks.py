"""Metric points as compressed chunks: the codec, the rollups of a batch's columns, and
storage that neither loses nor doubles a point (batches, compaction, range reads)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st
from trainhub.jobs.models import Job, Task
from trainhub.telemetry import storing
from trainhub.telemetry.chunks import (
    CHUNK_POINTS,
    COMPACT_AT,
    FULL_CHUNK,
    columns_of,
    read_series,
    stored_points,
)
from trainhub.telemetry.codec import EMPTY, ChunkError, Columns, decode, encode
from trainhub.telemetry.models import JobTelemetry, MetricChunk, MetricRollup, MetricSeries
from trainhub.telemetry.rollups import rollup, rollup_columns
from trainhub.telemetry.selectors import metric_buckets, metric_series
from trainhub.telemetry.services import ingest_metrics, write_points
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

NOW = datetime(2026, 1, 2, tzinfo=UTC)
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _columns(steps: list[int], times: list[int], values: list[float]) -> Columns:
    return Columns(
        np.asarray(steps, dtype=np.int64),
        np.asarray(times, dtype=np.int64),
        np.asarray(values, dtype=np.float64),
    )


def _same(a: Columns, b: Columns) -> bool:
    """Equal point for point, values bit for bit (NaN, -0.0)."""
    return (
        np.array_equal(a.steps, b.steps)
        and np.array_equal(a.times, b.times)
        and np.array_equal(a.values.view(np.uint64), b.values.view(np.uint64))
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(I64, I64, st.floats(allow_nan=True, allow_infinity=True, width=64)),
        max_size=300,
    )
)
def test_a_chunk_decodes_to_what_was_encoded(points: list[tuple[int, int, float]]) -> None:
    columns = _columns(*map(list, zip(*points, strict=True))) if points else EMPTY
    assert _same(decode(encode(columns)), columns)


def test_round_trip_edge_cases() -> None:
    cases = [
        EMPTY,
        _columns([7], [0], [-0.0]),
        _columns([2**53, 0, 2**53], [1, 2**62, -5], [float("nan"), float("inf"), 1e-308]),
        _columns([2**63 - 1, -(2**63)], [-(2**63), 2**63 - 1], [1.0, 2.0]),  # deltas wrap
        _columns(
            list(range(0, 5 * CHUNK_POINTS, 5)),
            [1_700_000_000_000_000] * CHUNK_POINTS,
            [1.0 / (s + 1) for s in range(CHUNK_POINTS)],
        ),
    ]
    for columns in cases:
        assert _same(decode(encode(columns)), columns)
        assert _same(decode(memoryview(encode(columns))), columns)  # as PostgreSQL gives it


def test_a_regular_series_takes_under_a_byte_a_point_and_corruption_is_refused() -> None:
    steps = list(range(10_000, 10_000 + CHUNK_POINTS))
    data = encode(
        _columns(
            steps, [1_700_000_000_000_000] * len(steps), [round(1 / (s + 1), 6) for s in steps]
        )
    )
    assert len(data) < CHUNK_POINTS
    for bad in (b"", data[:3], bytes([9]) + data[1:], data[:-4], data[:5] + b"x" * 20):
        with pytest.raises(ChunkError):
            decode(bad)


def test_by_step_keeps_the_order_of_points_of_one_step() -> None:
    columns = _columns([3, 1, 3, 2, 1], [0, 1, 2, 3, 4], [30.0, 10.0, 31.0, 20.0, 11.0])
    ordered = columns.by_step()
    assert ordered.steps.tolist() == [1, 1, 2, 3, 3]
    assert ordered.values.tolist() == [10.0, 11.0, 20.0, 30.0, 31.0]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["loss", "acc"]),
            st.integers(min_value=-70_000, max_value=2**40),
            st.floats(allow_nan=False, width=64),
        ),
        min_size=1,
        max_size=200,
    )
)
def test_rollups_of_columns_are_those_of_points(points: list[tuple[str, int, float]]) -> None:
    series = columns_of((n, s, v, NOW) for n, s, v in points)
    assert rollup_columns(series) == rollup(points)


@pytest.fixture
def task(db: Any) -> Task:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    job = make_job(alice)
    return Task.objects.create(job=job, role="worker", index=0, cpu=0.5, memory_mb=512)


def _batch(first: int, n: int, name: str = "loss") -> list[dict[str, Any]]:
    return [{"step": s, "values": {name: s / 7}} for s in range(first, first + n)]


def _state(job_id: int) -> tuple[Any, ...]:
    return (
        stored_points([job_id]),
        list(MetricSeries.objects.filter(job_id=job_id).values_list("name", "count")),
        list(
            MetricRollup.objects.filter(job_id=job_id)
            .order_by("name", "level", "block")
            .values_list("name", "level", "block", "count", "last_value")
        ),
        JobTelemetry.objects.get(pk=job_id).points,
    )


# A transaction of its own per batch, as the gateway's: ingest takes no savepoint.
@pytest.mark.django_db(transaction=True)
def test_a_batch_that_fails_midway_stores_nothing_and_loses_nothing_before_it(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between writing a batch's chunks and its commit: what was stored (and
    acknowledged) before is all there, nothing of the failed batch is (the agent sends
    it again, unacknowledged), and sending it again stores it once."""
    ingest_metrics(task=task, points=_batch(0, 300), now=NOW)
    before = _state(task.job_id)

    def crash(job_id: int, names: Any) -> None:
        raise ConnectionError("the server died after the chunk insert")

    monkeypatch.setattr(storing, "compact_due", crash)
    with pytest.raises(ConnectionError):
        ingest_metrics(task=task, points=_batch(300, 10), now=NOW)  # a small chunk: compacts
    assert MetricChunk.objects.count() == 1
    assert _state(task.job_id) == before
    monkeypatch.undo()
    ingest_metrics(task=task, points=_batch(300, 10), now=NOW)
    steps = [s for _, _, _, s, _, _ in stored_points([task.job_id])]
    assert steps == list(range(310))


@pytest.mark.django_db
def test_compaction_merges_small_chunks_without_losing_or_doubling_a_point(task: Task) -> None:
    other = Task.objects.create(job=task.job, role="worker", index=1, cpu=0.5, memory_mb=512)
    rnd = random.Random(3)
    sent: list[tuple[int | None, str, int, float]] = []
    for i in range(3 * COMPACT_AT + 5):
        who = task if i % 3 else other
        n = rnd.randrange(1, 40)
        first = rnd.randrange(0, 2000)  # overlapping steps: repeats across batches
        points = _batch(first, n) + _batch(first, 3, name="acc")
        ingest_metrics(task=who, points=points, now=NOW + timedelta(seconds=i))
        sent += [(who.pk, "loss", s, s / 7) for s in range(first, first + n)]
        sent += [(who.pk, "acc", s, s / 7) for s in range(first, first + 3)]
        if i == 50:
            mid = MetricChunk.objects.count()
            assert mid < i  # merged as it went
    stored = [(t, n, s, v) for _, t, n, s, v, _ in stored_points([task.job_id])]
    assert sorted(stored) == sorted(sent)  # every point once
    series = dict(MetricSeries.objects.values_list("name", "count"))
    assert series == {"loss": sum(1 for p in sent if p[1] == "loss"), "acc": 3 * 101}
    small = MetricChunk.objects.filter(count__lt=FULL_CHUNK)
    for name, count in MetricSeries.objects.values_list("name", "small_chunks"):
        assert count == small.filter(name=name).count() < COMPACT_AT
    # Chunks keep their task: a task's points are merged with that task's only.
    tasks = {(t, n) for t, n, _, _ in stored}
    assert tasks == {(task.pk, "loss"), (other.pk, "loss"), (task.pk, "acc"), (other.pk, "acc")}


@pytest.mark.django_db
def test_a_range_read_decodes_only_the_chunks_over_the_range(task: Task) -> None:
    for first in (0, 1000, 2000):
        ingest_metrics(task=task, points=_batch(first, 1000), now=NOW)
    assert MetricChunk.objects.count() == 3
    # Spoil the chunks outside steps 1000..1999: reading them would fail.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {MetricChunk._meta.db_table} SET data = %s WHERE first_step <> 1000",
            [b"spoiled"],
        )
    job = Job.objects.get(pk=task.job_id)
    got = metric_series(job, start=1200, end=1204)["loss"]
    assert [(p["step"], p["value"]) for p in got] == [(s, s / 7) for s in range(1200, 1205)]
    assert read_series(job.pk, ["loss"], start=1000, end=1999)["loss"].steps.tolist() == list(
        range(1000, 2000)
    )
    raw = metric_buckets(job, max_points=100, start=1500, end=1550)["series"]["loss"]
    assert [b["step"] for b in raw] == list(range(1500, 1551))
    # Downsampled reads come from the rollups, not the chunks.
    assert len(metric_buckets(job, max_points=10)["series"]["loss"]) <= 10
    with pytest.raises(ChunkError):
        metric_series(job, start=900, end=1100)


@pytest.mark.django_db
def test_written_points_read_back_in_step_order_with_their_times(task: Task) -> None:
    t0 = NOW - timedelta(hours=1)
    write_points(task.job_id, [("x", 5, 1.5), ("x", 2, 0.5)], task_id=task.pk, time=t0)
    write_points(task.job_id, [("x", 2, 0.25)], time=NOW)
    job = Job.objects.get(pk=task.job_id)
    assert metric_series(job)["x"] == [
        {"step": 2, "value": 0.5, "time": t0.isoformat()},
        {"step": 2, "value": 0.25, "time": NOW.isoformat()},
        {"step": 5, "value": 1.5, "time": t0.isoformat()},
    ]
    first = MetricChunk.objects.order_by("id").first()
    assert first is not None
    assert (first.first_step, first.last_step, first.count) == (2, 5, 2)
    assert (first.first_time, first.last_time) == (t0, t0)
