"""Retention: the raw points and log lines of jobs finished longer ago than
`TELEMETRY_RETENTION_DAYS` are deleted; series and rollups stay, so charts still draw."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job, Task
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.logchunks import stored_lines
from trainhub.telemetry.models import JobTelemetry, LogChunk, MetricRollup
from trainhub.telemetry.retention import Purged, purge_expired
from trainhub.telemetry.selectors import metric_buckets
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.telemetry.tasks import purge_expired_telemetry
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 20, tzinfo=UTC)


def _job(state: str, finished_days_ago: float | None, points: int = 1000) -> Job:
    user = User.objects.filter(username="alice").first()
    if user is None:
        user = make_user("alice")
        make_team("recsys", members={user: Role.MEMBER})
    job = make_job(user)
    finished = None if finished_days_ago is None else NOW - timedelta(days=finished_days_ago)
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=finished)
    task = Task.objects.create(job=job, role="worker", index=0, cpu=0.5, memory_mb=512)
    ingest_metrics(
        task=task,
        points=[{"step": s, "values": {"loss": float((s * 37) % 101)}} for s in range(points)],
        now=NOW,
    )
    ingest_logs(task=task, stream="stdout", lines=["a", "b"], now=NOW)
    return Job.objects.get(pk=job.pk)


def _raw(job: Job) -> tuple[int, int]:
    return len(stored_points([job.pk])), len(stored_lines(LogChunk.objects.filter(job=job)))


def test_only_jobs_finished_before_the_retention_lose_their_raw_telemetry() -> None:
    old = _job(JobState.SUCCEEDED, 10)
    recent = _job(JobState.FAILED, 2)
    running = _job(JobState.RUNNING, None)
    rollups = MetricRollup.objects.filter(job=old).count()
    assert purge_expired(now=NOW, days=7) == Purged(jobs=1, points=1000, lines=2)
    assert _raw(old) == (0, 0)
    assert _raw(recent) == (1000, 2) and _raw(running) == (1000, 2)
    assert MetricRollup.objects.filter(job=old).count() == rollups  # kept
    assert JobTelemetry.objects.get(pk=old.pk).purged_at == NOW
    assert JobTelemetry.objects.get(pk=recent.pk).purged_at is None
    # Once is enough: a later run finds nothing more to do.
    assert purge_expired(now=NOW + timedelta(hours=1), days=7) == Purged()


def test_retention_off_by_default_keeps_everything() -> None:
    old = _job(JobState.SUCCEEDED, 3650)
    assert purge_expired(now=NOW) == Purged()
    with override_settings(TELEMETRY_RETENTION_DAYS=30):
        assert purge_expired_telemetry() == {"jobs": 1, "points": 1000, "lines": 2}
    assert _raw(old) == (0, 0)


def test_a_purged_job_still_charts_from_its_rollups_and_the_api_says_so() -> None:
    job = _job(JobState.SUCCEEDED, 10)
    before = metric_buckets(job, max_points=50)["series"]["loss"]
    purge_expired(now=NOW, days=7)
    job = Job.objects.select_related("telemetry").get(pk=job.pk)
    after = metric_buckets(job, max_points=50)["series"]["loss"]
    assert after == before  # 1000 points over 50 buckets: rollups were read already
    client = APIClient()
    client.force_authenticate(User.objects.get(username="alice"))
    body = client.get(f"/api/v1/jobs/{job.pk}/metrics/", {"max_points": 2000}).json()
    assert body["purged_at"] == NOW.isoformat()
    buckets = body["series"]["loss"]
    # No raw points left: one bucket per block of 16 steps, exact over each block.
    assert len(buckets) == 63 and sum(b["count"] for b in buckets) == 1000
    assert buckets[-1]["step"] == 999 and buckets[-1]["value"] == float((999 * 37) % 101)
    logs = client.get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert logs["lines"] == [] and logs["purged_at"] is not None


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.integers(10, 40),
    st.one_of(st.none(), st.integers(-20, 1100)),
    st.one_of(st.none(), st.integers(-20, 1100)),
)
def test_a_purged_range_is_covered_by_whole_blocks(
    purged_job: Job, n: int, start: int | None, end: int | None
) -> None:
    """Every bucket holds whole 16-step blocks: its count, min, max and last point are
    those of the raw points (as they were) of the blocks the range touches."""
    values = {s: float((s * 37) % 101) for s in range(1000)}
    body = metric_buckets(purged_job, max_points=n, start=start, end=end)
    lo = 0 if start is None else max(start, 0)
    hi = 999 if end is None else min(end, 999)
    if lo > hi:
        assert body["series"] == {}
        return
    got = body["series"]["loss"]
    assert 0 < len(got) <= n
    inside = [s for s in values if lo // 16 * 16 <= s <= hi // 16 * 16 + 15]
    assert sum(b["count"] for b in got) == len(inside)
    previous = -1
    for bucket in got:
        members = [s for s in inside if previous < s <= bucket["step"]]
        assert bucket == {
            "step": max(members),
            "value": values[max(members)],
            "min": min(values[s] for s in members),
            "max": max(values[s] for s in members),
            "count": len(members),
        }
        assert (bucket["step"] + 1) % 16 == 0 or bucket["step"] == 999
        previous = bucket["step"]


@pytest.fixture
def purged_job() -> Job:
    job = _job(JobState.SUCCEEDED, 10)
    purge_expired(now=NOW, days=7)
    return Job.objects.select_related("telemetry").get(pk=job.pk)


@pytest.mark.parametrize(("days", "scheduled"), [(0, False), (30, True)])
def test_beat_runs_retention_only_when_it_is_on(days: float, scheduled: bool) -> None:
    from celery import Celery
    from trainhub.celery import _install_beat_schedule

    app = Celery("retention-test", set_as_current=False)
    app.conf.beat_schedule = {}
    with override_settings(TELEMETRY_RETENTION_DAYS=days):
        _install_beat_schedule(app)
    tasks = {entry["task"]: entry["schedule"] for entry in app.conf.beat_schedule.values()}
    assert "trainhub.scheduling.tasks.run_scheduling_cycle" in tasks
    assert ("trainhub.telemetry.tasks.purge_expired_telemetry" in tasks) is scheduled
