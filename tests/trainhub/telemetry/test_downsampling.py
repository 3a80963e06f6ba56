"""Downsampled metrics against a brute-force computation over the raw points.

Points go in through the ingest path (several batches, out of order, late, repeated
steps, several metrics); `metric_buckets` must return buckets that partition the points
of the range, each with the exact min, max, count and last point, and the raw points
themselves when the range holds no more than `max_points`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from trainhub.jobs.models import Job, Task
from trainhub.telemetry.models import MetricRollup, MetricSeries
from trainhub.telemetry.rollups import plan
from trainhub.telemetry.selectors import metric_buckets
from trainhub.telemetry.services import ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
Point = tuple[str, int, float]  # name, step, value, in arrival order


class Rollback(Exception):
    pass


@pytest.fixture
def task() -> Task:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    job = make_job(alice)
    return Task.objects.create(job=job, role="worker", index=0, cpu=0.5, memory_mb=512)


def _ingest(task: Task, batches: list[list[Point]]) -> None:
    for batch in batches:
        ingest_metrics(
            task=task,
            points=[{"step": step, "values": {name: value}} for name, step, value in batch],
            now=NOW,
        )


def _expected_check(
    points: list[Point], name: str, got: list[dict[str, Any]], n: int, lo: int, hi: int
) -> None:
    """The buckets of `name` against the raw points: a partition of the range's points."""
    mine = [(step, order, value) for order, (m, step, value) in enumerate(points) if m == name]
    inside = [p for p in mine if lo <= p[0] <= hi]
    assert len(got) <= n
    assert sum(b["count"] for b in got) == len(inside)
    steps = [b["step"] for b in got]
    assert steps == sorted(set(steps))
    previous = None
    for bucket in got:
        members = [
            p for p in inside if (previous is None or p[0] > previous) and p[0] <= bucket["step"]
        ]
        last = max(members)
        assert bucket == {
            "step": last[0],
            "value": last[2],
            "min": min(v for *_, v in members),
            "max": max(v for *_, v in members),
            "count": len(members),
        }
        previous = bucket["step"]
    if len(inside) <= n:  # exact: one bucket per step
        assert steps == sorted({p[0] for p in inside})
        return
    # The buckets are the plan's: steps origin + i * width onwards.
    mine_steps = [p[0] for p in mine]
    planned = plan(
        name,
        first=min(mine_steps),
        last=max(mine_steps),
        total=len(mine),
        max_points=n,
        start=lo,
        end=hi,
    )
    assert planned is not None
    assert [b["step"] for b in got] == [
        max(p[0] for p in inside if planned.bucket_of(p[0]) == i)
        for i in sorted({planned.bucket_of(p[0]) for p in inside})
    ]


steps = st.one_of(
    st.integers(0, 300),
    st.integers(-5000, 200_000),
    st.integers(10**9, 10**9 + 10**7),
)
point = st.tuples(st.sampled_from(["loss", "acc"]), steps, st.floats(-1e3, 1e3, width=32))
batches = st.lists(st.lists(point, min_size=1, max_size=60), min_size=1, max_size=5)
bound = st.one_of(st.none(), steps)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches, st.integers(10, 30), bound, bound)
def test_buckets_match_a_brute_force_over_the_raw_points(
    task: Task, data: list[list[Point]], n: int, start: int | None, end: int | None
) -> None:
    points = [p for batch in data for p in batch]
    try:
        with transaction.atomic():
            _ingest(task, data)
            job = Job.objects.get(pk=task.job_id)
            body = metric_buckets(job, max_points=n, start=start, end=end)
            for name in ("loss", "acc"):
                mine = [s for m, s, _ in points if m == name]
                if not mine:
                    assert name not in body["series"]
                    continue
                lo = min(mine) if start is None else max(start, min(mine))
                hi = max(mine) if end is None else min(end, max(mine))
                if lo > hi:
                    assert name not in body["series"]
                    continue
                _expected_check(points, name, body["series"][name], n, lo, hi)
            counts = [b["count"] for s in body["series"].values() for b in s]
            assert body["downsampled"] == any(c > 1 for c in counts)
            event(f"downsampled={body['downsampled']}, ranged={(start, end) != (None, None)}")
            raise Rollback
    except Rollback:
        pass


def test_a_million_steps_come_back_in_at_most_n_buckets_from_few_rows(
    task: Task, django_assert_max_num_queries: Any
) -> None:
    # 20,000 points spread over a million steps, in one batch per 2,000.
    data = [
        [("loss", s * 50 + 7, float(s % 97)) for s in range(i, i + 2000)]
        for i in range(0, 20000, 2000)
    ]
    _ingest(task, data)
    job = Job.objects.get(pk=task.job_id)
    with django_assert_max_num_queries(3):
        body = metric_buckets(job, max_points=100)
    got = body["series"]["loss"]
    assert body["downsampled"] and 50 < len(got) <= 100
    assert sum(b["count"] for b in got) == 20000
    assert got[-1]["step"] == 19999 * 50 + 7 and got[-1]["value"] == float(19999 % 97)
    assert {b["min"] for b in got} == {0.0} and {b["max"] for b in got} == {96.0}


def test_series_summaries_follow_late_and_out_of_order_points(task: Task) -> None:
    _ingest(task, [[("loss", 10, 1.0), ("loss", 5, 2.0)], [("loss", 2, 3.0), ("loss", 10, 4.0)]])
    series = MetricSeries.objects.get(job_id=task.job_id, name="loss")
    assert (series.first_step, series.last_step, series.count) == (2, 10, 4)
    top = MetricRollup.objects.get(job_id=task.job_id, name="loss", level=1, block=0)
    assert (top.min_value, top.max_value, top.count) == (1.0, 4.0, 4)
    assert (top.last_step, top.last_value) == (10, 4.0)  # the later point of step 10


def test_only_the_named_series_and_only_this_job(task: Task) -> None:
    _ingest(task, [[("loss", 1, 1.0), ("acc", 1, 0.5)]])
    job = Job.objects.get(pk=task.job_id)
    assert list(metric_buckets(job, max_points=10, names=["acc"])["series"]) == ["acc"]
    assert metric_buckets(job, max_points=10, names=["missing"]) == {
        "downsampled": False,
        "series": {},
    }
    other = make_job(User.objects.get(username="alice"))
    assert metric_buckets(other, max_points=10) == {"downsampled": False, "series": {}}


def _rows(task: Task) -> Iterator[tuple[Any, ...]]:
    return iter(
        MetricRollup.objects.filter(job_id=task.job_id)
        .order_by("level", "block")
        .values_list("level", "block", "count")
    )


def test_one_batch_writes_one_row_per_touched_block_of_each_level(task: Task) -> None:
    _ingest(task, [[("loss", s, 1.0) for s in range(300)]])
    rows = list(_rows(task))
    assert [r for r in rows if r[0] == 1] == [(1, b, 16) for b in range(18)] + [(1, 18, 12)]
    assert [r for r in rows if r[0] == 2] == [(2, 0, 256), (2, 1, 44)]
    assert [r for r in rows if r[0] == 8] == [(8, 0, 300)]


@pytest.mark.parametrize(("start", "end"), [(1234, 4321), (None, 4097), (4095, None), (17, 18)])
def test_a_range_that_cuts_blocks_is_exact_at_its_ends(
    task: Task, start: int | None, end: int | None
) -> None:
    points = [("loss", s, float((s * 7919) % 1009)) for s in range(5000)]
    _ingest(task, [points[i : i + 700] for i in range(0, 5000, 700)])
    job = Job.objects.get(pk=task.job_id)
    body = metric_buckets(job, max_points=10, start=start, end=end)
    lo, hi = start if start is not None else 0, end if end is not None else 4999
    _expected_check(points, "loss", body["series"]["loss"], 10, lo, hi)
