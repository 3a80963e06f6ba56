"""The stall check (Celery beat, `telemetry.stallcheck`): a running job without progress
past its limit is marked stalled once, its nodes are asked for stacks, and after its
grace it restarts, fails or only stays marked, as its spec's `stall.on_stall` says."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from trainhub.events import JobStalled, StacksWanted
from trainhub.jobs.choices import JobState, TaskRole, TaskState
from trainhub.jobs.models import Job, JobEvent, Task
from trainhub.jobs.services import record_task_status
from trainhub.nodes.models import Node
from trainhub.telemetry.progress import record_progress
from trainhub.telemetry.stallcheck import StallCheck, check_stalls
from trainhub.telemetry.tasks import check_stalled_jobs
from trainhub.tenancy.choices import Role

from ps_runtime.agent.protocol import PhaseState, ProgressItem

from ..event_capture import HANDLER, Capture, capturer
from ..factories import make_job, make_node, make_team, make_user, running_job

STALL = {"k": 2, "floor_seconds": 20, "grace_seconds": 5}


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    settings.EVENT_HANDLERS = [HANDLER]


@pytest.fixture
def published(django_capture_on_commit_callbacks: Any) -> Capture:
    return capturer(django_capture_on_commit_callbacks)


@dataclass
class Run:
    job: Job
    node: Node
    t0: datetime

    def at(self, seconds: float) -> datetime:
        return self.t0 + timedelta(seconds=seconds)

    @property
    def coordinator(self) -> Task:
        return Task.objects.get(job=self.job, role=TaskRole.COORDINATOR)

    def closures(self, *times: float, first: int = 1) -> None:
        """The coordinator's closure count rose at each of `times` (seconds)."""
        task = self.coordinator
        for count, seconds in enumerate(times, start=first):
            item = ProgressItem(self.at(seconds), closures=count)
            record_progress(task=task, items=[item], now=self.at(seconds))

    def phase(self, state: PhaseState, seconds: float) -> None:
        item = ProgressItem(self.at(seconds), phase="evaluation", state=state)
        record_progress(task=self.coordinator, items=[item], now=self.at(seconds))

    def check(self, seconds: float) -> StallCheck:
        return check_stalls(now=self.at(seconds))

    def fresh(self) -> Job:
        self.job.refresh_from_db()
        return self.job

    def events(self, kind: str) -> list[JobEvent]:
        return list(JobEvent.objects.filter(job=self.job, kind=kind))


def start(**overrides: Any) -> Run:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, _ = make_node()
    job = running_job(make_job(alice, **{"stall": STALL, **overrides}), node)
    return Run(job, node, timezone.now() + timedelta(seconds=1))


@pytest.fixture
def run(db: Any) -> Run:
    return start()


def test_a_job_past_its_limit_is_marked_once_and_its_nodes_asked_for_stacks(
    run: Run, published: Capture
) -> None:
    run.closures(0, 2, 4, 6, 8)  # every 2 s: the limit is the floor, 20 s
    assert run.check(28) == StallCheck(judged=1)
    assert run.fresh().stalled_at is None
    with published() as events:
        assert run.check(29).stalled == 1
    assert run.fresh().stalled_at == run.at(29)
    [stall] = run.events("stall")
    assert stall.reason.startswith(
        "stalled: no progress for 21 s (its limit: 2 x p95 interval 2.0 s, at least 20 s); "
        "taking its tasks' Python stacks; unless it resumes within 5 s, it is restarted"
    )
    assert stall.actor == "stall check"
    assert JobStalled(run.job.pk, stall.reason) in events
    assert StacksWanted(run.job.pk, (run.node.pk,)) in events
    assert run.check(33).stalled == 0  # marked already, grace not over: nothing new
    assert len(run.events("stall")) == 1


def test_after_its_grace_a_stalled_job_restarts_from_its_checkpoint(run: Run) -> None:
    run.closures(0, 2, 4, 6, 8)
    run.check(29)
    assert run.check(33).acted == 0
    assert run.check(34).acted == 1
    job = run.fresh()
    assert job.state == JobState.RESTARTING and job.stalled_at is None
    assert job.end_cause == "stalled" and "stall.floor_seconds" in job.end_hint
    restart = JobEvent.objects.filter(job=job, to_state=JobState.RESTARTING).get()
    assert restart.reason.startswith("stalled: no progress for 26 s")
    assert restart.actor == "stall check"
    assert set(Task.objects.filter(job=job).values_list("attempt", flat=True)) == {2}
    # Running again: not judged before the new attempt makes progress, however long.
    for task in Task.objects.filter(job=job):
        record_task_status(
            node_id=run.node.pk,
            task_id=task.pk,
            attempt=task.attempt,
            state=TaskState.RUNNING,
            exit_code=None,
            message="",
            now=run.at(40),
        )
    assert run.fresh().state == JobState.RUNNING
    assert run.check(3600) == StallCheck(judged=1)


@pytest.mark.django_db
def test_on_stall_stop_fails_the_job_with_cause_stalled() -> None:
    run = start(stall={**STALL, "on_stall": "stop"})
    run.closures(0, 2, 4, 6, 8)
    run.check(29)
    run.check(34)
    job = run.fresh()
    assert job.state == JobState.FAILED and job.end_cause == "stalled"
    assert job.message.startswith("stalled: no progress for 26 s")
    assert " — stalled: no progress for 26 s" in job.message  # the cause and its hint


@pytest.mark.django_db
def test_a_job_with_no_restart_left_fails_instead() -> None:
    run = start(retry={"max": 0, "backoff_seconds": 0})
    run.closures(0, 2, 4, 6, 8)
    run.check(29)
    run.check(34)
    job = run.fresh()
    assert (job.state, job.end_cause) == (JobState.FAILED, "stalled")
    assert "no restart is left" in job.message


@pytest.mark.django_db
def test_on_stall_notify_only_marks_the_job() -> None:
    run = start(stall={**STALL, "on_stall": "notify"})
    run.closures(0, 2, 4, 6, 8)
    run.check(29)
    assert run.check(600) == StallCheck(judged=1)
    job = run.fresh()
    assert job.state == JobState.RUNNING and job.stalled_at == run.at(29)
    assert [e.kind for e in JobEvent.objects.filter(job=job, time__gt=run.t0)] == ["stall"]


def test_progress_resuming_clears_the_stall(run: Run) -> None:
    run.closures(0, 2, 4, 6, 8)
    run.check(29)
    run.closures(31, first=6)
    assert run.check(32).resumed == 1
    assert run.fresh().stalled_at is None
    [resumed] = run.events("resumed")
    assert resumed.reason == "progress resumed after 3 s stalled"


def test_an_evaluation_phase_does_not_count(run: Run) -> None:
    run.closures(0, 2, 4, 6, 8)
    run.phase(PhaseState.BEGIN, 9)
    assert run.check(600).stalled == 0
    run.phase(PhaseState.END, 900)
    assert run.check(915).stalled == 0
    assert run.check(922).stalled == 1  # 8 s before the phase, 22 s after it: past 20 s


def test_jobs_that_are_not_running_or_report_nothing_are_not_judged(run: Run) -> None:
    assert run.check(10_000) == StallCheck()  # no progress reported at all
    run.closures(0, 2, 4, 6, 8)
    Job.objects.filter(pk=run.job.pk).update(state=JobState.RESTARTING)
    assert run.check(10_000) == StallCheck()


def test_the_beat_task_runs_the_check(run: Run) -> None:
    JobEvent.objects.filter(job=run.job, to_state=JobState.RUNNING).update(time=run.at(-200))
    run.closures(-100, -98, -96, -94)  # the beat task's clock is the real one
    assert check_stalled_jobs() == {"judged": 1, "stalled": 1, "acted": 0}


def test_the_check_is_in_celerys_beat_schedule_every_10_s() -> None:
    from celery import Celery
    from trainhub.celery import _install_beat_schedule
    from trainhub.telemetry.stallcheck import INTERVAL_SECONDS

    app = Celery("stall-check-test", set_as_current=False)
    app.conf.beat_schedule = {}
    _install_beat_schedule(app)
    tasks = {entry["task"]: entry["schedule"] for entry in app.conf.beat_schedule.values()}
    assert tasks["trainhub.telemetry.tasks.check_stalls"] == INTERVAL_SECONDS == 10.0


def test_acting_on_a_notify_stall_or_a_job_no_longer_stalled_changes_nothing(run: Run) -> None:
    from trainhub.jobs.services.stalls import act_on_stall
    from trainhub.jobs.stalls import StallSpec

    notify = StallSpec(on_stall="notify")
    Job.objects.filter(pk=run.job.pk).update(stalled_at=run.at(0))
    assert act_on_stall(run.job.pk, detail="x", spec=notify, now=run.at(100)) == ""
    Job.objects.filter(pk=run.job.pk).update(stalled_at=None)
    assert act_on_stall(run.job.pk, detail="x", spec=StallSpec(), now=run.at(100)) == ""
    assert run.fresh().state == JobState.RUNNING


def test_a_job_whose_task_the_platform_relaunches_is_not_judged_meanwhile(run: Run) -> None:
    run.closures(0, 2, 4, 6, 8)
    worker = Task.objects.get(job=run.job, role=TaskRole.WORKER)
    # Relaunched after a failure, waiting out its backoff: the job runs on without it.
    Task.objects.filter(pk=worker.pk).update(state=TaskState.ASSIGNED, not_before=run.at(60))
    assert run.check(59).stalled == 0
    Task.objects.filter(pk=worker.pk).update(state=TaskState.RUNNING, not_before=None)
    assert run.check(69).stalled == 1
