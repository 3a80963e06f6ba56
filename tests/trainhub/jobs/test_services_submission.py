"""submit_job, clone_job, scale_job and cancel_job: what owners do, and what they may not."""

from __future__ import annotations

import pytest
from django.utils import timezone
from trainhub.events import (
    JobEventRecorded,
    JobScaled,
    JobStateChanged,
    JobSubmitted,
    NodeTasksChanged,
)
from trainhub.jobs.choices import DesiredState, JobState, Priority
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import (
    JobStateError,
    PriorityCapExceeded,
    ScaleError,
    cancel_job,
    clone_job,
    place_job,
    scale_job,
    submit_job,
)
from trainhub.jobs.spec import parse_job_spec
from trainhub.tenancy.models import PriorityCap

from ..event_capture import Capture
from ..factories import gang_placements, make_job, spec
from .conftest import World

# factories.spec(): coordinator, one PS and each worker ask for 0.5 CPU and 512 MiB.
ELASTIC = {"min": 1, "max": 3, "resources": {"cpu": 0.5, "memory_mb": 512}}


def test_submit_creates_a_pending_job_with_its_spec_and_publishes_it(
    world: World, published: Capture
) -> None:
    job_spec = parse_job_spec(spec(), user=world.alice)
    now = timezone.now()
    with published() as events:
        job = submit_job(user=world.alice, spec=job_spec, now=now)
    assert job.state == JobState.PENDING
    assert job.team == world.team and job.priority == Priority.NORMAL
    assert job.spec == job_spec.to_dict()
    assert Job.objects.get(pk=job.pk).job_spec == job_spec
    assert job.pending_reason == "waiting for the scheduler"
    assert job.runtime_token
    [event] = JobEvent.objects.filter(job=job)
    assert (event.kind, event.to_state, event.actor) == ("submitted", "pending", "alice")
    assert events == [
        JobEventRecorded(
            job_id=job.pk,
            time=now.isoformat(),
            kind="submitted",
            reason="submitted",
            actor="alice",
            to_state=JobState.PENDING,
        ),
        JobSubmitted(job_id=job.pk, team_id=world.team.pk),
    ]


def test_a_job_alone_above_its_priority_cap_is_refused_and_nothing_is_created(
    world: World, published: Capture
) -> None:
    PriorityCap.objects.create(team=world.team, priority=Priority.NORMAL, cpu=1)
    job_spec = parse_job_spec(spec(), user=world.alice)  # asks for 1.5 CPU
    with published() as events, pytest.raises(PriorityCapExceeded) as refused:
        submit_job(user=world.alice, spec=job_spec, now=timezone.now())
    assert refused.value.impossible
    assert "this job alone requests" in str(refused.value)
    assert not Job.objects.exists() and not JobEvent.objects.exists()
    assert events == []


def test_a_job_that_would_overfill_the_cap_beside_others_waits_for_room(
    world: World, published: Capture
) -> None:
    PriorityCap.objects.create(team=world.team, priority=Priority.NORMAL, cpu=2)
    first = make_job(world.alice)
    job_spec = parse_job_spec(spec(name="second"), user=world.alice)
    with published() as events, pytest.raises(PriorityCapExceeded) as refused:
        submit_job(user=world.alice, spec=job_spec, now=timezone.now())
    assert not refused.value.impossible
    assert "already request" in str(refused.value)
    assert list(Job.objects.all()) == [first]
    assert events == []
    # Another priority has no cap.
    other = parse_job_spec(spec(name="third", priority="offline"), user=world.alice)
    assert submit_job(user=world.alice, spec=other, now=timezone.now()).priority == "offline"


def test_clone_submits_a_new_job_and_says_where_it_came_from(world: World) -> None:
    job = make_job(world.alice)
    copy = parse_job_spec({**job.spec, "name": "again"}, user=world.alice)
    new = clone_job(job=job, user=world.alice, spec=copy, now=timezone.now())
    assert new.pk != job.pk and new.name == "again"
    assert new.events.get().reason == f"cloned from job {job.pk}"


def test_scale_sets_the_target_and_publishes_it(world: World, published: Capture) -> None:
    job = make_job(world.alice, workers=ELASTIC)
    with published() as events:
        scaled = scale_job(job=job, workers=3, actor="alice", now=timezone.now())
    assert scaled.target_workers == 3
    assert job.events.filter(kind="scale").get().reason == "workers 1 -> 3"
    assert JobScaled(job_id=job.pk, workers=3) in events
    # The same target again changes nothing.
    with published() as again:
        scale_job(job=job, workers=3, actor="alice", now=timezone.now())
    assert again == [] and job.events.filter(kind="scale").count() == 1


@pytest.mark.parametrize("workers", [0, 4])
def test_scale_outside_min_max_is_refused_and_changes_nothing(
    world: World, published: Capture, workers: int
) -> None:
    job = make_job(world.alice, workers=ELASTIC)
    with published() as events, pytest.raises(ScaleError, match=r"workers\.min and workers\.max"):
        scale_job(job=job, workers=workers, actor="alice", now=timezone.now())
    job.refresh_from_db()
    assert job.target_workers is None
    assert not job.events.filter(kind="scale").exists()
    assert events == []


def test_scaling_a_finished_job_is_refused(world: World) -> None:
    job = make_job(world.alice, workers=ELASTIC)
    cancel_job(job=job, actor="alice", now=timezone.now())
    with pytest.raises(JobStateError, match="cannot be scaled"):
        scale_job(job=job, workers=2, actor="alice", now=timezone.now())
    job.refresh_from_db()
    assert job.target_workers is None


def test_growing_past_the_priority_cap_is_refused_and_changes_nothing(world: World) -> None:
    PriorityCap.objects.create(team=world.team, priority=Priority.NORMAL, cpu=2)
    job = make_job(world.alice, workers=ELASTIC)  # 1.5 CPU at one worker
    with pytest.raises(PriorityCapExceeded):
        scale_job(job=job, workers=3, actor="alice", now=timezone.now())  # 2.5 CPU
    job.refresh_from_db()
    assert job.target_workers is None
    # Shrinking never needs room.
    scale_job(job=job, workers=2, actor="alice", now=timezone.now())
    scale_job(job=job, workers=1, actor="alice", now=timezone.now())


def test_cancel_ends_the_job_once(world: World, published: Capture) -> None:
    job = make_job(world.alice)
    now = timezone.now()
    with published() as events:
        cancel_job(job=job, actor="alice", now=now)
    assert job.state == JobState.CANCELLED
    assert job.cancel_requested_at == now and job.finished_at == now
    assert JobStateChanged(job_id=job.pk, state=JobState.CANCELLED) in events
    with published() as again, pytest.raises(JobStateError, match="nothing to cancel"):
        cancel_job(job=job, actor="alice", now=timezone.now())
    assert again == []
    assert job.events.filter(kind="state").count() == 1


def test_cancelling_a_placed_job_asks_its_node_to_stop_the_tasks(
    world: World, published: Capture
) -> None:
    job = make_job(world.alice)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    with published() as events:
        cancel_job(job=job, actor="alice", now=timezone.now())
    assert set(job.tasks.values_list("desired", flat=True)) == {DesiredState.STOP}
    assert NodeTasksChanged(node_ids=(world.node.pk,)) in events
