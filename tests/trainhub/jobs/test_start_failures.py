"""Tasks that fail at start: those of `NODE_QUARANTINE_AFTER` jobs in a row on one node
cordon it with the reason (audit entry, job event), while one job failing all its tasks
counts once; a task that ran, or an admin's uncordon, resets the count; and a job whose
task failed at start is placed again through the scheduler, on other nodes first, instead
of being restarted on the same node."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from trainhub.audit.models import AuditEntry
from trainhub.events import NodeChanged
from trainhub.jobs.choices import DesiredState, JobState, TaskRole, TaskState
from trainhub.jobs.models import Job, Task
from trainhub.jobs.services import place_job, record_task_status, settle_unstarted_tasks
from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import Node
from trainhub.nodes.quarantine import StartOutcome, start_outcome
from trainhub.nodes.services import set_node_state
from trainhub.scheduling.snapshot import read_cluster

from ps_runtime.taskenv import EXIT_ENVIRONMENT

from ..event_capture import Capture
from ..factories import gang_placements, make_job, make_node
from .conftest import World


@pytest.fixture(autouse=True)
def _quarantine_after_three(settings: Any) -> None:
    settings.NODE_QUARANTINE_AFTER = 3
    settings.NODE_START_FAILURE_SECONDS = 10


def _placed(world: World, node: Node | None = None, **spec: Any) -> Job:
    job = make_job(world.alice, **spec)
    place_job(job=job, placements=gang_placements(job, node or world.node), now=timezone.now())
    return job


def _report(
    task: Task, state: TaskState, exit_code: int | None = None, *, now: datetime | None = None
) -> None:
    task.refresh_from_db()
    assert task.node_id is not None
    record_task_status(
        node_id=task.node_id,
        task_id=task.pk,
        attempt=task.attempt,
        state=state,
        exit_code=exit_code,
        message="cannot open /root/var/code: Permission denied" if exit_code else "",
        now=now or timezone.now(),
    )


def _fail_at_start(job: Job) -> None:
    """The job's worker starts and exits 1 at once, as on a node whose task uids cannot
    read what they need."""
    worker = job.tasks.get(role=TaskRole.WORKER)
    _report(worker, TaskState.RUNNING)
    _report(worker, TaskState.FAILED, 1)


def _node(world: World) -> Node:
    world.node.refresh_from_db()
    return world.node


def test_start_outcomes() -> None:
    now = timezone.now()
    recent, long_ago = now - timedelta(seconds=2), now - timedelta(minutes=5)

    def outcome(failed: bool, started: datetime | None, code: int | None) -> StartOutcome:
        return start_outcome(
            failed=failed, succeeded=code == 0, started_at=started, exit_code=code, now=now
        )

    assert outcome(True, None, None) == StartOutcome.FAILED_AT_START  # never launched
    assert outcome(True, recent, 1) == StartOutcome.FAILED_AT_START
    assert outcome(True, long_ago, 127) == StartOutcome.FAILED_AT_START  # cannot exec
    assert outcome(True, long_ago, 1) == StartOutcome.RAN
    assert outcome(True, recent, EXIT_ENVIRONMENT) == StartOutcome.NEITHER  # the job's
    assert outcome(True, recent, 137) == StartOutcome.NEITHER  # killed by a signal
    assert outcome(True, recent, -9) == StartOutcome.NEITHER
    assert outcome(False, recent, 0) == StartOutcome.RAN  # succeeded
    assert outcome(False, long_ago, 143) == StartOutcome.RAN  # stopped after running
    assert outcome(False, recent, 143) == StartOutcome.NEITHER  # stopped at once
    assert outcome(False, None, None) == StartOutcome.NEITHER  # stopped before it ran


def test_one_job_failing_at_start_again_and_again_counts_once(world: World) -> None:
    # A job with a bug of its own fails on any node; placed on this one again (nothing
    # else fits), it is not to blame on the node three times over.
    job = _placed(world, max_restarts=3)
    for round in range(3):
        if round:
            place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
        _fail_at_start(job)
        settle_unstarted_tasks(node_id=world.node.pk, live=set(), now=timezone.now())
        job.refresh_from_db()
        assert (job.state, job.restarts) == (JobState.PENDING, round + 1)
    node = _node(world)
    assert (node.state, node.start_failures) == (NodeState.ACTIVE, 1)
    _fail_at_start(_placed(world))  # another job's: counted
    assert _node(world).start_failures == 2


def test_tasks_stopped_with_their_failed_job_reset_nothing(world: World) -> None:
    # The coordinator fails at start; the PS and worker it leaves behind take a while to
    # stop (a loaded node): that they ran says nothing in the node's favour.
    job = _placed(world, max_restarts=0)
    started = timezone.now()
    for task in job.tasks.all():
        _report(task, TaskState.RUNNING, now=started)
    coordinator = job.tasks.get(role=TaskRole.COORDINATOR)
    _report(coordinator, TaskState.FAILED, 1, now=started + timedelta(seconds=2))
    assert _node(world).start_failures == 1
    for task in job.tasks.exclude(role=TaskRole.COORDINATOR):
        _report(task, TaskState.STOPPED, 143, now=started + timedelta(seconds=30))
    assert _node(world).start_failures == 1


@pytest.fixture
def second_node(world: World) -> Node:
    """Another ready node: where a quarantined node's jobs can go."""
    node, _ = make_node("node-2", cpus=8, memory_mb=32768)
    return node


def test_the_only_ready_node_is_never_quarantined(world: World) -> None:
    """A standalone's single node: cordoning it would stop every job, and a newcomer's
    three mistyped entrypoints in a row fail at start just the same."""
    for _ in range(4):
        _fail_at_start(_placed(world))
    node = _node(world)
    assert (node.state, node.start_failures, node.quarantine_reason) == (NodeState.ACTIVE, 4, "")


@pytest.mark.usefixtures("second_node")
def test_three_failed_starts_in_a_row_quarantine_the_node(world: World, published: Capture) -> None:
    for _ in range(2):
        _fail_at_start(_placed(world))
    node = _node(world)
    assert (node.state, node.start_failures, node.quarantine_reason) == (NodeState.ACTIVE, 2, "")
    last = _placed(world)
    with published() as events:
        _fail_at_start(last)
    node = _node(world)
    assert node.state == NodeState.CORDONED
    assert node.start_failures == 3
    assert node.quarantine_reason.startswith(
        "the tasks of 3 jobs in a row failed at start on this node"
    )
    assert f"job {last.pk} worker 0: exit code 1: cannot open" in node.quarantine_reason
    assert node.quarantined_at is not None
    entry = AuditEntry.objects.get(action="node.quarantine", object_id=str(node.pk))
    assert entry.actor is None
    assert entry.after == {"state": NodeState.CORDONED, "reason": node.quarantine_reason}
    assert NodeChanged(node_id=node.pk, reason="node.quarantine") in events
    event = last.events.get(kind="quarantine")
    assert event.reason.startswith(f"node {node.hostname} cordoned: the tasks of 3 jobs")


def test_a_task_that_ran_resets_the_count(world: World) -> None:
    _fail_at_start(_placed(world))
    _fail_at_start(_placed(world))
    ran = _placed(world)
    worker = ran.tasks.get(role=TaskRole.WORKER)
    started = timezone.now()
    _report(worker, TaskState.RUNNING, now=started)
    _report(worker, TaskState.STOPPED, 0, now=started + timedelta(minutes=10))
    assert _node(world).start_failures == 0
    _fail_at_start(_placed(world))
    node = _node(world)
    assert (node.state, node.start_failures) == (NodeState.ACTIVE, 1)


@pytest.mark.usefixtures("second_node")
def test_uncordon_clears_the_quarantine_and_the_count(world: World) -> None:
    for _ in range(3):
        _fail_at_start(_placed(world))
    assert _node(world).state == NodeState.CORDONED
    set_node_state(node=_node(world), state=NodeState.ACTIVE)
    node = _node(world)
    assert (node.state, node.start_failures, node.quarantine_reason) == (NodeState.ACTIVE, 0, "")
    assert node.quarantined_at is None
    _fail_at_start(_placed(world))  # counted from zero: one is not enough
    assert _node(world).state == NodeState.ACTIVE


def test_a_job_that_failed_at_start_is_placed_again_away_from_the_node(world: World) -> None:
    job = _placed(world, max_restarts=3)
    coordinator = job.tasks.get(role=TaskRole.COORDINATOR)
    _report(coordinator, TaskState.RUNNING)
    _fail_at_start(job)
    job.refresh_from_db()
    # Not relaunched on the same node: its tasks stop and it goes back to the queue.
    assert (job.state, job.restarts) == (JobState.PREEMPTED, 1)
    assert (
        "failed at start on node-1" in job.events.filter(to_state=JobState.PREEMPTED).get().reason
    )
    assert set(job.tasks.exclude(role=TaskRole.WORKER).values_list("desired", flat=True)) == {
        DesiredState.STOP
    }
    assert job.tasks.get(role=TaskRole.WORKER).attempt == 1  # no new attempt on node-1
    _report(coordinator, TaskState.STOPPED, 0)
    settle_unstarted_tasks(node_id=world.node.pk, live=set(), now=timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    # The scheduler sees where it just failed, and places it elsewhere first.
    other, _ = make_node("node-2")
    (seen,) = [j for j in read_cluster(timezone.now()).snapshot.jobs if j.id == job.pk]
    assert seen.avoid_nodes == frozenset({world.node.pk})
    assert other.pk not in seen.avoid_nodes
