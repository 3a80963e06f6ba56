"""GPU indices handed out when the scheduler's decisions are applied (scheduling/apply.py).

The policy only counts GPUs; the platform picks which ones. Two tasks on a node must never
share a GPU, a task only gets GPUs the node has, and a GPU held by a task that has not
stopped is not handed out again; once the task stops, it is free for the next job.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job, Task
from trainhub.jobs.services import cancel_job
from trainhub.nodes.models import Node
from trainhub.scheduling.services import run_cycle
from trainhub.tenancy.choices import Role

from ..agent_sim import report
from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db

SMALL = {"cpu": 1, "memory_mb": 512}


@pytest.fixture
def gpu_node() -> dict[str, Any]:
    """One 16-CPU node with 4 GPUs, and a team whose quota covers all of it."""
    alice = make_user("alice")
    make_team("vision", members={alice: Role.MEMBER}, cpu=16, memory_mb=65536, gpu=4)
    node, _ = make_node("gpu-node", cpus=16, memory_mb=65536, gpus=4)
    return {"alice": alice, "node": node}


def _gpu_job(user: Any, name: str, workers: int) -> Job:
    return make_job(
        user,
        team="vision",
        name=name,
        parameter_servers={"replicas": 1, "resources": SMALL},
        coordinator={"resources": SMALL},
        workers={"min": workers, "max": workers, "resources": {**SMALL, "gpu": 1}},
    )


def _gpus(job: Job) -> dict[tuple[str, int], list[int]]:
    return {
        (t.role, t.index): list(t.gpu_indices)
        for t in Task.objects.filter(job=job).order_by("role", "index")
    }


def _held(job: Job) -> list[int]:
    return sorted(i for indices in _gpus(job).values() for i in indices)


def _state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def test_jobs_placed_in_one_cycle_get_distinct_gpus_of_the_node(gpu_node: dict[str, Any]) -> None:
    first = _gpu_job(gpu_node["alice"], "first", workers=2)
    second = _gpu_job(gpu_node["alice"], "second", workers=2)
    assert run_cycle(now=timezone.now()).started == 2
    for job in (first, second):
        gpus = _gpus(job)
        assert gpus[("coordinator", 0)] == [] and gpus[("ps", 0)] == []
        assert [len(gpus[("worker", i)]) for i in range(2)] == [1, 1]
    assert sorted(_held(first) + _held(second)) == [0, 1, 2, 3]


def test_a_later_job_gets_only_gpus_no_running_task_holds(gpu_node: dict[str, Any]) -> None:
    node = gpu_node["node"]
    first = _gpu_job(gpu_node["alice"], "first", workers=3)
    run_cycle(now=timezone.now())
    for task in Task.objects.filter(job=first):
        report(node.pk, {"id": task.pk, "attempt": task.attempt}, "running")
    assert _state(first) == JobState.RUNNING
    held = _held(first)
    assert len(set(held)) == 3

    second = _gpu_job(gpu_node["alice"], "second", workers=1)
    third = _gpu_job(gpu_node["alice"], "third", workers=1)
    run_cycle(now=timezone.now())
    assert _state(second) == JobState.STARTING
    assert _held(second) == sorted({0, 1, 2, 3} - set(held))
    # No GPU is left for the third job: it waits rather than share one.
    assert _state(third) == JobState.PENDING
    assert not Task.objects.filter(job=third).exists()

    # The first job's tasks stop: their GPUs go to the job that waited.
    cancel_job(job=first, actor="alice", now=timezone.now())
    for task in Task.objects.filter(job=first):
        report(node.pk, {"id": task.pk, "attempt": task.attempt}, "stopped", 143)
    run_cycle(now=timezone.now())
    assert _state(third) == JobState.STARTING
    assert _held(third)[0] in held
    assert not set(_held(third)) & set(_held(second))


def test_only_gpus_the_node_reports_are_handed_out(gpu_node: dict[str, Any]) -> None:
    """A node may expose a sparse set of GPUs (others reserved or broken): use only those."""
    gpus = [{"index": i, "model": "NVIDIA A100", "memory_mb": 40960} for i in (1, 3, 6, 7)]
    Node.objects.filter(pk=gpu_node["node"].pk).update(gpus=gpus)
    job = _gpu_job(gpu_node["alice"], "sparse", workers=4)
    run_cycle(now=timezone.now())
    assert _held(job) == [1, 3, 6, 7]
