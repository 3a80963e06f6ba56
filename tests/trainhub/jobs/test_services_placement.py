"""place_job, rescale_workers and set_pending_reasons: the scheduler's decisions carried out."""

from __future__ import annotations

from django.utils import timezone
from trainhub.events import JobPendingReasonChanged, JobStateChanged, NodeTasksChanged
from trainhub.jobs.choices import DesiredState, JobState, TaskRole, TaskState
from trainhub.jobs.models import Task
from trainhub.jobs.services import (
    Placement,
    cancel_job,
    place_job,
    rescale_workers,
    set_pending_reasons,
)

from ..event_capture import Capture
from ..factories import gang_placements, make_job, make_node
from .conftest import World

ELASTIC = {"min": 1, "max": 3, "resources": {"cpu": 0.5, "memory_mb": 512}}


def _slots(job_id: int) -> list[tuple[str, int, int, str]]:
    return list(
        Task.objects.filter(job_id=job_id)
        .order_by("role", "index")
        .values_list("role", "index", "attempt", "desired")
    )


def test_place_starts_the_whole_gang_once(world: World, published: Capture) -> None:
    job = make_job(world.alice, parameter_servers={"replicas": 2})
    other, _ = make_node("node-2")
    placements = gang_placements(job, world.node)
    placements[1] = Placement(TaskRole.PS, 0, other.pk, 41000, 0.5, 512, borrowed=True)
    now = timezone.now()
    with published() as events:
        assert place_job(job=job, placements=placements, now=now)
    job.refresh_from_db()
    assert job.state == JobState.STARTING
    assert (job.started_at, job.last_rescale_at, job.pending_reason) == (now, now, "")
    assert _slots(job.pk) == [
        ("coordinator", 0, 1, "run"),
        ("ps", 0, 1, "run"),
        ("ps", 1, 1, "run"),
        ("worker", 0, 1, "run"),
    ]
    assert job.tasks.get(role="ps", index=0).borrowed
    nodes = ", ".join(sorted({f"node {world.node.pk}", f"node {other.pk}"}))
    assert job.events.get(kind="state").reason == (
        f"placed on {nodes} (on quota borrowed from other teams)"
    )
    assert JobStateChanged(job_id=job.pk, state=JobState.STARTING) in events
    assert NodeTasksChanged(node_ids=tuple(sorted((world.node.pk, other.pk)))) in events
    # A second placement of the same job is refused and changes nothing.
    with published() as again:
        assert not place_job(job=job, placements=placements, now=timezone.now())
    assert again == [] and job.tasks.count() == 4


def test_a_job_that_is_not_pending_is_not_placed(world: World) -> None:
    job = make_job(world.alice)
    cancel_job(job=job, actor="alice", now=timezone.now())
    assert not place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    assert not job.tasks.exists()


def test_rescale_adds_and_stops_workers_and_reuses_stopped_slots(
    world: World, published: Capture
) -> None:
    job = make_job(world.alice, workers=ELASTIC)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    worker = Placement(TaskRole.WORKER, 0, world.node.pk, 41010, 0.5, 512)

    with published() as events:
        rescale_workers(job=job, add=[worker], stop=[], now=timezone.now(), why="room")
    assert [s for s in _slots(job.pk) if s[0] == "worker"] == [
        ("worker", 0, 1, "run"),
        ("worker", 1, 1, "run"),
    ]
    assert job.events.get(kind="rescale").reason == "workers 1 -> 2 (room)"
    assert NodeTasksChanged(node_ids=(world.node.pk,)) in events

    second = job.tasks.get(role="worker", index=1)
    rescale_workers(job=job, add=[], stop=[second], now=timezone.now())
    second.refresh_from_db()
    assert second.desired == DesiredState.STOP
    # Once the stopped worker is gone, growing again reuses its slot as a new attempt.
    Task.objects.filter(pk=second.pk).update(state=TaskState.STOPPED)
    rescale_workers(job=job, add=[worker], stop=[], now=timezone.now())
    assert [s for s in _slots(job.pk) if s[0] == "worker"] == [
        ("worker", 0, 1, "run"),
        ("worker", 1, 2, "run"),
    ]
    assert list(job.events.filter(kind="rescale").values_list("reason", flat=True)) == [
        "workers 1 -> 2 (room)",
        "workers 2 -> 1",
        "workers 1 -> 2",
    ]


def test_pending_reasons_are_stored_and_published_only_when_they_change(
    world: World, published: Capture
) -> None:
    waiting = make_job(world.alice, name="waiting")
    same = make_job(world.alice, name="same")
    placed = make_job(world.alice, name="placed")
    place_job(job=placed, placements=gang_placements(placed, world.node), now=timezone.now())
    with published() as events:
        set_pending_reasons(
            {
                waiting.pk: "team quota exhausted: cpu 2/2",
                same.pk: "waiting for the scheduler",  # unchanged
                placed.pk: "not pending any more",
                999999: "no such job",
            }
        )
    for job in (waiting, same, placed):
        job.refresh_from_db()
    assert waiting.pending_reason == "team quota exhausted: cpu 2/2"
    assert same.pending_reason == "waiting for the scheduler"
    assert placed.pending_reason == ""
    assert events == [
        JobPendingReasonChanged(job_id=waiting.pk, pending_reason="team quota exhausted: cpu 2/2")
    ]
