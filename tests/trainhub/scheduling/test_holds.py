"""Held jobs (a paused experiment's trials): the cycle leaves them in the queue; a running
one checkpoints and stops first; released, they start again."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.jobs.services import place_job
from trainhub.jobs.services.holds import hold_job, release_job
from trainhub.scheduling.queue import queue_positions
from trainhub.scheduling.services import run_cycle
from trainhub.tenancy.choices import Role

from ..agent_sim import agent_tasks, report
from ..factories import gang_placements, make_job, make_node, make_team, make_user

SMALL = {"cpu": 1, "memory_mb": 512}


@pytest.fixture
def cluster(db: Any) -> dict[str, Any]:
    alice = make_user("alice")
    make_team("owner", members={alice: Role.MEMBER}, cpu=4, memory_mb=16384)
    node, credential = make_node(cpus=4, memory_mb=16384)
    return {"alice": alice, "node": node, "credential": credential}


def _job(c: dict[str, Any]) -> Job:
    return make_job(
        c["alice"],
        team="owner",
        parameter_servers={"replicas": 1, "resources": SMALL},
        workers={"min": 1, "max": 1, "resources": SMALL},
        coordinator={"resources": SMALL},
    )


def _state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def test_a_held_pending_job_waits_until_released(cluster: dict[str, Any]) -> None:
    job = _job(cluster)
    assert hold_job(job=job, reason="experiment 1 is paused", actor="t", now=timezone.now())
    run_cycle(now=timezone.now())
    assert _state(job) == JobState.PENDING
    assert job.pending_reason == "held: experiment 1 is paused"
    assert release_job(job=job, actor="t", now=timezone.now())
    run_cycle(now=timezone.now())
    assert _state(job) == JobState.STARTING


def test_a_held_running_job_checkpoints_stops_and_stays_in_the_queue(
    cluster: dict[str, Any],
) -> None:
    c = cluster
    job = _job(c)
    run_cycle(now=timezone.now())
    tasks = [t for t in agent_tasks(c["credential"])["tasks"] if t["job_id"] == job.pk]
    for task in tasks:
        report(c["node"].pk, task, "running")
    assert _state(job) == JobState.RUNNING
    hold_job(job=job, reason="experiment 1 is paused", actor="t", now=timezone.now())
    assert _state(job) == JobState.PREEMPTED
    for task in job.tasks.all():
        report(c["node"].pk, {"id": task.pk, "attempt": 1}, "stopped", 0)
    assert _state(job) == JobState.PENDING
    assert job.pending_reason == "held: experiment 1 is paused"
    run_cycle(now=timezone.now())
    assert _state(job) == JobState.PENDING


def test_a_job_held_after_the_cycle_read_it_does_not_start(cluster: dict[str, Any]) -> None:
    job = _job(cluster)
    node = cluster["node"]
    Job.objects.filter(pk=job.pk).update(held=True)  # the hold lands mid-cycle
    assert not place_job(job=job, placements=gang_placements(job, node), now=timezone.now())
    assert _state(job) == JobState.PENDING and not job.tasks.exists()


def test_held_jobs_take_no_place_in_the_queue(cluster: dict[str, Any]) -> None:
    first, second = _job(cluster), _job(cluster)
    hold_job(job=first, reason="experiment 1 is paused", actor="t", now=timezone.now())
    assert queue_positions() == {second.pk: 1}
