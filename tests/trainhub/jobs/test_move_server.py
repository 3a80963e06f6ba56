"""move_server: a running job's server placed on another node as a replacement, told to
every node of the job; refused, changing nothing, where it could cost a shard."""

from __future__ import annotations

import json

from django.utils import timezone
from trainhub.events import NodeTasksChanged
from trainhub.jobs.choices import JobState, TaskRole, TaskState
from trainhub.jobs.models import Job, Task
from trainhub.jobs.selectors import desired_tasks
from trainhub.jobs.services import move_server

from ps_runtime.taskenv import CLUSTER, PS_REJOIN

from ..event_capture import Capture
from ..factories import make_job, make_node, running_job
from .conftest import World

SMALL = {"cpu": 0.5, "memory_mb": 512}


def _running(world: World, replication: int) -> Job:
    job = make_job(
        world.alice,
        parameter_servers={"replicas": 3, "replication": replication, "resources": SMALL},
    )
    return running_job(job, world.node)


def _move(job: Job, node_id: int) -> bool:
    return move_server(
        job=job,
        index=1,
        node_id=node_id,
        port=7001,
        why="making room for job 9",
        now=timezone.now(),
    )


def test_a_moved_server_is_a_replacement_on_the_new_node_and_the_job_runs_on(
    world: World, published: Capture
) -> None:
    other, _ = make_node("node-2", address="127.0.0.2")
    job = _running(world, replication=1)
    with published() as events:
        assert _move(job, other.pk)
    server = job.tasks.get(role=TaskRole.PS, index=1)
    assert (server.node_id, server.port, server.attempt, server.rejoin) == (other.pk, 7001, 2, True)
    assert server.state == TaskState.ASSIGNED
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.restarts == 0
    move = job.events.get(kind="move")
    assert move.reason.startswith("ps 1 moved from node-1 to node-2 (making room for job 9)")
    assert NodeTasksChanged(node_ids=tuple(sorted({world.node.pk, other.pk}))) in events
    # The new node starts it as a replacement; the old node's tasks see its new address.
    (started,) = [t for t in desired_tasks(other).tasks if t.job_id == job.pk]
    assert PS_REJOIN.name in started.env
    for task in desired_tasks(world.node).tasks:
        if task.job_id == job.pk:
            assert json.loads(task.env[CLUSTER.name])["ps"][1] == "127.0.0.2:7001"
    assert (job.pk, TaskRole.PS, 1) not in {
        (t.job_id, t.role, t.index) for t in desired_tasks(world.node).tasks
    }


def test_no_move_without_replication_or_while_a_server_is_not_running(world: World) -> None:
    other, _ = make_node("node-2", address="127.0.0.2")
    unreplicated = _running(world, replication=0)
    assert not _move(unreplicated, other.pk)
    job = _running(world, replication=1)
    Task.objects.filter(job=job, role=TaskRole.PS, index=2).update(state=TaskState.ASSIGNED)
    assert not _move(job, other.pk)
    for j in (unreplicated, job):
        assert not j.events.filter(kind="move").exists()
        assert set(j.tasks.filter(role=TaskRole.PS).values_list("node_id", "attempt")) == {
            (world.node.pk, 1)
        }
