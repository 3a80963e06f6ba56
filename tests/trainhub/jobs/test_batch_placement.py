"""place_jobs: a cycle's starts in a few queries, with the effect of place_job on each."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from trainhub.events import JobEventRecorded, JobStateChanged, NodeTasksChanged
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job, RuntimeCA
from trainhub.jobs.services import Start, cancel_job, place_job, place_jobs

from ..event_capture import Capture
from ..factories import gang_placements, make_job
from .conftest import World


def _start(job: Job, world: World, hosts: list[str] | None = None) -> Start:
    return Start(job, gang_placements(job, world.node), hosts or ["10.0.0.7"])


def _as_place_job_leaves_it(job: Job) -> tuple[Any, ...]:
    job.refresh_from_db()
    tasks = list(
        job.tasks.order_by("role", "index").values_list(
            "role", "index", "attempt", "node_id", "port", "cpu", "memory_mb", "desired"
        )
    )
    events = list(job.events.values_list("kind", "from_state", "to_state", "reason", "actor"))
    return job.state, job.started_at, job.pending_reason, tasks, events


def test_many_jobs_start_as_place_job_starts_one(world: World, published: Capture) -> None:
    now = timezone.now()
    alone = make_job(world.alice, name="alone")
    assert place_job(job=alone, placements=gang_placements(alone, world.node), now=now)
    jobs = [make_job(world.alice, name=f"batch-{i}") for i in range(20)]
    with published() as events, CaptureQueriesContext(connection) as queries:
        started = place_jobs([_start(j, world) for j in jobs], now=now, tls_mode="auto")
    assert [j.pk for j in started] == [j.pk for j in jobs]
    assert len(queries.captured_queries) <= 8  # not per job
    expected = _as_place_job_leaves_it(alone)
    for job in jobs:
        assert _as_place_job_leaves_it(job) == expected
    assert JobStateChanged(job_id=jobs[0].pk, state=JobState.STARTING) in events
    assert any(isinstance(e, JobEventRecorded) and e.job_id == jobs[-1].pk for e in events)
    assert NodeTasksChanged(node_ids=(world.node.pk,)) in events


def test_tls_follows_the_nodes_addresses(world: World) -> None:
    remote, local = make_job(world.alice, name="remote"), make_job(world.alice, name="local")
    place_jobs(
        [_start(remote, world, ["10.0.0.7"]), _start(local, world, ["127.0.0.1"])],
        now=timezone.now(),
        tls_mode="auto",
    )
    assert set(RuntimeCA.objects.values_list("job_id", flat=True)) == {remote.pk}


def test_a_job_cancelled_meanwhile_is_left_alone(world: World) -> None:
    kept, cancelled = make_job(world.alice, name="kept"), make_job(world.alice, name="gone")
    cancel_job(job=Job.objects.get(pk=cancelled.pk), actor="alice", now=timezone.now())
    started = place_jobs(
        [_start(kept, world), _start(cancelled, world)], now=timezone.now(), tls_mode="off"
    )
    assert [j.pk for j in started] == [kept.pk]
    cancelled.refresh_from_db()
    assert cancelled.state == JobState.CANCELLED and not cancelled.tasks.exists()
