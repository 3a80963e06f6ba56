"""preempt_job and advance_preemption: checkpoint, stop, requeue."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from trainhub.events import JobStateChanged, NodeTasksChanged
from trainhub.jobs.choices import DesiredState, JobState, TaskRole, TaskState
from trainhub.jobs.models import Job, Task
from trainhub.jobs.services import (
    advance_preemption,
    place_job,
    preempt_job,
    record_task_status,
)

from ..event_capture import Capture
from ..factories import gang_placements, make_job
from .conftest import World


def _running(world: World) -> Job:
    job = make_job(world.alice)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    for task in job.tasks.all():
        _report(task, TaskState.RUNNING)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return job


def _report(task: Task, state: TaskState, exit_code: int | None = None) -> None:
    assert task.node_id is not None
    record_task_status(
        node_id=task.node_id,
        task_id=task.pk,
        attempt=task.attempt,
        state=state,
        exit_code=exit_code,
        message="",
        now=timezone.now(),
    )


def _desired(job: Job) -> dict[str, str]:
    return dict(job.tasks.values_list("role", "desired"))


def test_preemption_checkpoints_stops_and_requeues(world: World, published: Capture) -> None:
    job = _running(world)
    now = timezone.now()
    job.started_at = now - timedelta(seconds=1000)  # checkpoints every 300 s: 100 s at risk
    job.save(update_fields=["started_at"])
    with published() as events:
        assert preempt_job(job=job, grace_seconds=30, reason="reclaimed", now=now)
    job.refresh_from_db()
    assert (job.state, job.preempted_at, job.preemptions) == (JobState.PREEMPTED, now, 1)
    assert job.events.get(to_state="preempted").reason == (
        "reclaimed; asking its coordinator to save a checkpoint and stop (grace 30 s); "
        "without one it loses about 100 s of work since its last checkpoint "
        "(it checkpoints every 300 s)"
    )
    # Only the coordinator is asked to stop; PS and worker keep serving it.
    assert _desired(job) == {"coordinator": "stop", "ps": "run", "worker": "run"}
    assert NodeTasksChanged(node_ids=(world.node.pk,)) in events

    _report(job.tasks.get(role=TaskRole.COORDINATOR), TaskState.STOPPED, 0)
    assert job.events.get(kind="checkpoint").reason == (
        "the coordinator saved a checkpoint and stopped"
    )
    assert _desired(job) == {"coordinator": "stop", "ps": "stop", "worker": "stop"}

    ps, worker = job.tasks.exclude(role=TaskRole.COORDINATOR).order_by("role")
    _report(ps, TaskState.STOPPED, 143)
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTED  # the worker still runs
    with published() as requeued:
        _report(worker, TaskState.STOPPED, 143)
    job.refresh_from_db()
    assert (job.state, job.pending_reason, job.preempted_at) == (
        JobState.PENDING,
        "requeued after a preemption",
        None,
    )
    assert job.pending_since is not None
    assert (
        JobStateChanged(
            job_id=job.pk, state=JobState.PENDING, pending_reason="requeued after a preemption"
        )
        in requeued
    )
    # Once requeued, the preemption is over: advancing again changes nothing.
    advance_preemption(job, now=timezone.now())
    assert job.events.filter(kind="state", to_state="pending").count() == 1


def test_a_coordinator_stopping_without_a_checkpoint_is_noted(world: World) -> None:
    job = _running(world)
    preempt_job(job=job, grace_seconds=30, reason="reclaimed", now=timezone.now())
    _report(job.tasks.get(role=TaskRole.COORDINATOR), TaskState.FAILED, 137)
    reason = job.events.get(kind="checkpoint").reason
    assert "without a new checkpoint (exit code 137)" in reason
    assert "losing about" in reason and "of work since its last checkpoint" in reason


def test_only_a_running_job_can_be_preempted(world: World, published: Capture) -> None:
    job = make_job(world.alice)
    with published() as events:
        assert not preempt_job(job=job, grace_seconds=30, reason="x", now=timezone.now())
    job.refresh_from_db()
    assert (job.state, job.preemptions) == (JobState.PENDING, 0)
    assert events == []


def test_an_overdue_coordinator_does_not_hold_up_the_preemption(world: World) -> None:
    job = _running(world)
    start = timezone.now()
    preempt_job(job=job, grace_seconds=30, reason="reclaimed", now=start)
    advance_preemption(job, now=start + timedelta(seconds=10), grace_seconds=30)
    assert _desired(job) == {"coordinator": "stop", "ps": "run", "worker": "run"}
    advance_preemption(job, now=start + timedelta(seconds=31), grace_seconds=30)
    assert _desired(job) == {"coordinator": "stop", "ps": "stop", "worker": "stop"}
    assert job.events.filter(kind="stop").count() == 1


def test_a_job_whose_coordinator_is_gone_moves_on_at_once(world: World) -> None:
    job = _running(world)
    Task.objects.filter(job=job, role=TaskRole.COORDINATOR).update(state=TaskState.FAILED)
    preempt_job(job=job, grace_seconds=30, reason="reclaimed", now=timezone.now())
    assert set(
        job.tasks.filter(state__in=["assigned", "running"]).values_list("desired", flat=True)
    ) == {DesiredState.STOP}


def test_tasks_stopped_by_a_preemption_end_with_the_cause_preempted(world: World) -> None:
    job = _running(world)
    assert preempt_job(job=job, grace_seconds=30, reason="reclaimed", now=timezone.now())
    coordinator = job.tasks.get(role=TaskRole.COORDINATOR)
    _report(coordinator, TaskState.STOPPED, 0)
    ps = job.tasks.get(role=TaskRole.PS)
    _report(ps, TaskState.FAILED, 143)  # killed by the stop's SIGTERM: still the preemption
    ends = dict(job.tasks.values_list("role", "end_cause"))
    assert ends == {"coordinator": "preempted", "ps": "preempted", "worker": ""}
    hint = Task.objects.get(pk=ps.pk).end_hint
    assert hint.startswith("the scheduler stopped it to make room for another job")
