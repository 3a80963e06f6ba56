"""What active tasks hold, summed by the database: node loads, team usage by priority."""

from __future__ import annotations

from typing import Any

import pytest
from trainhub.jobs.choices import TaskRole, TaskState
from trainhub.jobs.models import Job, Task
from trainhub.jobs.selectors import node_loads
from trainhub.jobs.usage import held_by, job_request, quota_usage
from trainhub.tenancy.resources import Resources

from ..factories import make_job, make_node
from .conftest import World

pytestmark = pytest.mark.django_db


def _task(job: Job, node: Any, index: int, state: str, gpus: list[int], cpu: float) -> Task:
    return Task.objects.create(
        job=job,
        role=TaskRole.WORKER,
        index=index,
        state=state,
        node=node,
        cpu=cpu,
        memory_mb=1024,
        gpu_indices=gpus,
    )


def test_loads_and_usage_count_active_tasks_with_their_gpus(world: World) -> None:
    gpu_node, _ = make_node("gpu-1", cpus=32, memory_mb=65536, gpus=4)
    job = make_job(world.alice, priority="production")
    _task(job, gpu_node, 0, TaskState.RUNNING, [0, 1], 1.5)
    _task(job, gpu_node, 1, TaskState.ASSIGNED, [2], 0.5)
    _task(job, world.node, 2, TaskState.RUNNING, [], 2.0)
    _task(job, gpu_node, 3, TaskState.SUCCEEDED, [3], 4.0)  # finished: holds nothing

    loads = node_loads()
    assert loads[gpu_node.pk].held == Resources(2.0, 2048, 3)
    assert loads[gpu_node.pk].tasks == 2
    assert loads[world.node.pk].held == Resources(2.0, 1024, 0)
    assert set(node_loads([world.node.pk])) == {world.node.pk}

    held = held_by([world.team.pk])
    assert held == {world.team.pk: {"production": Resources(4.0, 3072, 3)}}
    assert held_by([world.team.pk + 1000]) == {}


def test_quota_usage_reads_what_jobs_request_only_when_asked(world: World) -> None:
    job = make_job(world.alice, priority="offline")
    usage = quota_usage([world.team.pk])[world.team.pk]
    assert usage.requested_by_priority == {"offline": job_request(job.job_spec)}
    light = quota_usage([world.team.pk], requested=False)[world.team.pk]
    assert light.requested_by_priority == {}
    assert light.used == usage.used and light.lent == usage.lent
