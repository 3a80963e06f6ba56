"""Queue positions come from the database in the policy's own order
(`policy.order.team_queue_key`), aging included, in one query however long the queue."""

from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from trainhub.jobs.choices import PRIORITY_WEIGHTS, JobState
from trainhub.jobs.models import Job
from trainhub.scheduling.policy import order
from trainhub.scheduling.policy.model import Job as PolicyJob
from trainhub.scheduling.policy.model import Resources
from trainhub.scheduling.queue import position_if_submitted, queue_positions
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

AGING = 60.0


def _key(job: Job, now: datetime, job_id: int | None = None) -> tuple[float, ...]:
    policy_job = PolicyJob(
        id=job.pk if job_id is None else job_id,
        team="",
        priority=job.priority,
        state="pending",
        submit_time=job.created_at.timestamp(),
        worker=Resources(),
        vruntime=job.vruntime,
        pending_since=None if job.pending_since is None else job.pending_since.timestamp(),
    )
    return order.team_queue_key(policy_job, now.timestamp(), AGING)


@pytest.fixture
def queue() -> list[Job]:
    """40 pending jobs of every priority, some waiting for several aging periods, with
    ties in virtual runtime and submission time; and some jobs that are not pending."""
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    rng = random.Random(7)
    now = timezone.now()
    jobs = [make_job(alice, name=f"job-{i}") for i in range(44)]
    for i, job in enumerate(jobs):
        created = now - timedelta(seconds=rng.choice([0, 10, 10, 400]))
        waited = rng.choice([None, 0, 30, 59.9, 60.1, 125, 170, 400])
        Job.objects.filter(pk=job.pk).update(
            priority=rng.choice(list(PRIORITY_WEIGHTS)),
            vruntime=rng.choice([0.0, 0.0, 0.5, 2.0]),
            created_at=created,
            pending_since=None if waited is None else now - timedelta(seconds=waited),
            state=JobState.RUNNING if i >= 40 else JobState.PENDING,
        )
    return list(Job.objects.filter(state=JobState.PENDING))


@override_settings(SCHEDULER_AGING_SECONDS_PER_LEVEL=AGING)
def test_positions_follow_the_policys_order(queue: list[Job]) -> None:
    now = timezone.now()
    expected = {job.pk: i + 1 for i, job in enumerate(sorted(queue, key=lambda j: _key(j, now)))}
    assert queue_positions(now=now) == expected
    running = Job.objects.exclude(state=JobState.PENDING).values_list("pk", flat=True)[0]
    some = [queue[3].pk, queue[17].pk, running]
    assert queue_positions(some, now=now) == {j: expected[j] for j in some[:2]}


@override_settings(SCHEDULER_AGING_SECONDS_PER_LEVEL=AGING)
@pytest.mark.parametrize("priority", list(PRIORITY_WEIGHTS))
def test_a_new_job_would_stand_where_the_policy_puts_it(queue: list[Job], priority: str) -> None:
    now = timezone.now()
    newcomer = Job(priority=priority, vruntime=0.0, created_at=now, pending_since=now)
    mine = _key(newcomer, now, job_id=sys.maxsize)
    assert position_if_submitted(priority, now=now) == 1 + sum(
        1 for job in queue if _key(job, now) < mine
    )


@override_settings(SCHEDULER_AGING_SECONDS_PER_LEVEL=0)
def test_without_aging_the_priority_alone_sets_the_level(queue: list[Job]) -> None:
    now = timezone.now()
    levels = {p: i for i, p in enumerate(PRIORITY_WEIGHTS)}  # experiment < ... < production
    expected = sorted(queue, key=lambda j: (-levels[j.priority], j.vruntime, j.created_at, j.pk))
    assert queue_positions(now=now) == {job.pk: i + 1 for i, job in enumerate(expected)}


def test_one_query_however_long_the_queue(queue: list[Job], django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(1):
        queue_positions([queue[0].pk])
    with django_assert_num_queries(1):
        position_if_submitted("normal", now=timezone.now())
