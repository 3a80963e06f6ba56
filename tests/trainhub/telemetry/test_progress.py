"""A job's progress as ingest records it (`telemetry.progress`): steps and closure counts
that rise, the intervals between them, phases left out; one UPDATE per batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from trainhub.jobs.models import Job, Task
from trainhub.telemetry.models import JobTelemetry
from trainhub.telemetry.progress import Progress, record_progress
from trainhub.telemetry.services import ingest_metrics
from trainhub.tenancy.choices import Role

from ps_runtime.agent.protocol import PhaseState, ProgressItem

from ..factories import make_job, make_team, make_user

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_rising_step_or_count_is_progress_and_the_intervals_leave_phases_out() -> None:
    p = Progress()
    assert p.progressed(7, 1, _at(0), step=10)
    assert (p.at, p.intervals) == (_at(0), [])  # the first progress: no interval yet
    assert not p.progressed(7, 1, _at(1), step=10)  # the same step again
    assert not p.progressed(7, 1, _at(1), step=3)  # an older one (another metric)
    assert p.progressed(7, 1, _at(2), closures=5)
    assert p.phase(7, 1, PhaseState.BEGIN, _at(3))
    assert p.phase(7, 1, PhaseState.BEGIN, _at(4))  # nested: a checkpoint in an evaluation
    assert p.phase(7, 1, PhaseState.END, _at(50))
    assert p.phase_since == _at(3)  # the outer phase is still open
    assert p.phase(7, 1, PhaseState.END, _at(103))
    assert (p.phase_since, p.paused) == (None, 100.0)
    assert p.progressed(7, 1, _at(105), step=11)
    assert p.intervals == [2.0, 3.0]  # 105 - 2 - 100 s of phases
    assert p.paused == 0.0


def test_progress_during_an_open_phase_counts_the_phase_from_there() -> None:
    p = Progress()
    p.progressed(7, 1, _at(0), closures=1)
    p.phase(7, 1, PhaseState.BEGIN, _at(1))
    p.progressed(7, 1, _at(11), closures=2)  # closures of an evaluation complete
    assert p.intervals == [1.0] and p.phase_since == _at(11)
    p.phase(7, 1, PhaseState.END, _at(31))
    assert p.paused == 20.0


def test_a_new_attempt_starts_afresh_and_a_late_message_of_an_old_one_is_ignored() -> None:
    p = Progress()
    p.progressed(7, 1, _at(0), step=500)
    p.progressed(7, 1, _at(2), step=510)
    p.phase(7, 1, PhaseState.BEGIN, _at(3))  # the attempt dies in its checkpoint
    # Restarted from the checkpoint at step 400: lower steps are progress of attempt 2,
    # its first one without an interval (the restart's gap is no step interval).
    assert p.progressed(7, 2, _at(300), step=400)
    assert p.intervals == [2.0]
    assert p.phases == {} and p.phase_since is None
    assert p.progressed(7, 2, _at(302), step=401)
    assert p.intervals == [2.0, 2.0]
    assert not p.progressed(7, 1, _at(303), step=999)
    assert not p.phase(7, 1, PhaseState.BEGIN, _at(303))


def test_the_window_keeps_the_recent_intervals_and_round_trips_as_json() -> None:
    p = Progress()
    for i in range(50):
        p.progressed(3, 1, _at(i * 2.5), closures=i)
    assert len(p.intervals) == 32 and set(p.intervals) == {2.5}
    assert Progress.load(p.dump()) == p


@pytest.fixture
def task(db: Any) -> Task:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    return Task.objects.create(
        job=make_job(alice), role="coordinator", index=0, cpu=0.5, memory_mb=512
    )


def _progress(job: Job) -> Progress:
    return Progress.load(JobTelemetry.objects.get(pk=job.pk).progress)


def test_ingest_records_progress_from_metric_steps_in_the_batchs_one_update(task: Task) -> None:
    points = [{"step": s, "values": {"loss": 1.0 / s, "lr": 0.1}} for s in range(1, 50)]
    ingest_metrics(task=task, points=points, now=_at(0))
    with CaptureQueriesContext(connection) as queries:
        ingest_metrics(task=task, points=[{"step": 60, "values": {"loss": 0.1}}], now=_at(4))
    updates = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1 and '"progress"' in updates[0], updates
    progress = _progress(task.job)
    assert (progress.at, progress.intervals) == (_at(4), [4.0])
    assert progress.marks == {str(task.pk): [1, 60, -1]}
    with CaptureQueriesContext(connection) as queries:  # no step beyond 60: no progress
        ingest_metrics(task=task, points=[{"step": 60, "values": {"acc": 1}}], now=_at(9))
    updates = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1 and '"progress"' not in updates[0], updates
    assert _progress(task.job).at == _at(4)


def test_points_over_the_budget_are_progress_all_the_same(task: Task, settings: Any) -> None:
    settings.TELEMETRY_METRIC_POINTS_PER_JOB = 1
    ingest_metrics(task=task, points=[{"step": 1, "values": {"loss": 1}}], now=_at(0))
    ingest_metrics(task=task, points=[{"step": 2, "values": {"loss": 1}}], now=_at(3))
    assert _progress(task.job).intervals == [3.0]


def test_progress_items_record_closures_and_phases(task: Task) -> None:
    def items(*specs: dict[str, Any]) -> list[ProgressItem]:
        return [ProgressItem(time=_at(0), **s) for s in specs]

    assert record_progress(task=task, items=items({"closures": 3}), now=_at(0))
    # One batch: the highest count is one progress, whatever the items in between.
    record_progress(task=task, items=items({"closures": 4}, {"closures": 9}), now=_at(2))
    assert _progress(task.job).intervals == [2.0]
    begin, end = {"phase": "evaluation", "state": PhaseState.BEGIN}, {"phase": "evaluation"}
    record_progress(task=task, items=items(begin), now=_at(3))
    record_progress(task=task, items=items({**end, "state": PhaseState.END}), now=_at(300))
    assert not record_progress(task=task, items=items({"closures": 9}), now=_at(301))
    record_progress(task=task, items=items({"closures": 10}), now=_at(303))
    progress = _progress(task.job)
    assert progress.intervals == [2.0, 4.0] and progress.at == _at(303)
