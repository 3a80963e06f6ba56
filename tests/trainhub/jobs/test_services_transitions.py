"""transition_job: the guarded state machine every other service moves jobs through."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from trainhub.events import JobEventRecorded, JobStateChanged, NodeTasksChanged
from trainhub.jobs.choices import DesiredState, JobState
from trainhub.jobs.models import Job
from trainhub.jobs.services import place_job, transition_job

from ..event_capture import Capture
from ..factories import gang_placements, make_job
from .conftest import World


def test_an_allowed_transition_changes_state_records_and_publishes(
    world: World, published: Capture
) -> None:
    job = make_job(world.alice)
    now = timezone.now()
    with published() as events:
        moved = transition_job(
            job, JobState.FAILED, reason="broken", actor="tester", now=now, message="broken"
        )
    assert moved
    assert (job.state, job.message, job.finished_at) == (JobState.FAILED, "broken", now)
    event = job.events.get(kind="state")
    assert (event.from_state, event.to_state, event.reason) == ("pending", "failed", "broken")
    assert events == [
        JobEventRecorded(
            job_id=job.pk,
            time=now.isoformat(),
            kind="state",
            reason="broken",
            actor="tester",
            from_state="pending",
            to_state="failed",
        ),
        JobStateChanged(job_id=job.pk, state=JobState.FAILED, message="broken"),
    ]


def test_a_transition_the_state_does_not_allow_changes_nothing(
    world: World, published: Capture
) -> None:
    job = make_job(world.alice)
    with published() as events:
        moved = transition_job(
            job, JobState.RUNNING, reason="?", actor="tester", now=timezone.now(), restarts=5
        )
    assert not moved
    job.refresh_from_db()
    assert (job.state, job.restarts) == (JobState.PENDING, 0)
    assert not job.events.filter(kind="state").exists()
    assert events == []


def test_a_stale_copy_of_the_job_cannot_win_twice(world: World) -> None:
    job = make_job(world.alice)
    stale = Job.objects.get(pk=job.pk)
    now = timezone.now()
    assert transition_job(job, JobState.CANCELLED, reason="a", actor="a", now=now)
    assert not transition_job(stale, JobState.FAILED, reason="b", actor="b", now=now)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.events.filter(kind="state").count() == 1


def test_a_job_that_ends_has_its_tasks_stopped(world: World, published: Capture) -> None:
    job = make_job(world.alice)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    with published() as events:
        transition_job(
            job, JobState.FAILED, reason="x", actor="t", now=timezone.now() + timedelta(seconds=1)
        )
    assert set(job.tasks.values_list("desired", flat=True)) == {DesiredState.STOP}
    assert NodeTasksChanged(node_ids=(world.node.pk,)) in events


def test_requeued_job_publishes_its_pending_reason(world: World, published: Capture) -> None:
    job = make_job(world.alice)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    transition_job(job, JobState.PREEMPTED, reason="p", actor="t", now=timezone.now())
    with published() as events:
        transition_job(
            job, JobState.PENDING, reason="q", actor="t", now=timezone.now(), pending_reason="back"
        )
    assert JobStateChanged(job_id=job.pk, state=JobState.PENDING, pending_reason="back") in events
