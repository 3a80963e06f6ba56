"""The browser's live feed: each domain event reaches a job's watchers as `job.js` reads it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.utils import timezone
from trainhub import events
from trainhub.jobs.choices import TaskRole
from trainhub.jobs.models import Job, Task
from trainhub.telemetry import live
from trainhub.telemetry.consumers import JobStreamConsumer
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db(transaction=True)

TIME = "2026-01-01T12:00:00+00:00"


def _feed_cases(job_id: int) -> list[tuple[events.Event, dict[str, Any]]]:
    """(event, what the browser receives) for every event kind the feed carries."""
    point = {"name": "loss", "step": 3, "value": 0.5, "time": TIME}
    line = {"id": 9, "source": "worker-0", "stream": "stdout", "line": "hi", "time": TIME}
    return [
        (
            events.JobStateChanged(job_id=job_id, state="failed", message="worker 0 exited"),
            {"type": "state", "state": "failed", "message": "worker 0 exited"},
        ),
        (
            events.JobStateChanged(job_id=job_id, state="pending", pending_reason="no room"),
            {"type": "state", "state": "pending", "message": "", "pending_reason": "no room"},
        ),
        (
            events.JobEventRecorded(
                job_id=job_id,
                time=TIME,
                kind="state",
                reason="placed on node 1",
                actor="scheduler",
                from_state="pending",
                to_state="starting",
            ),
            {
                "type": "event",
                "time": TIME,
                "kind": "state",
                "from_state": "pending",
                "to_state": "starting",
                "reason": "placed on node 1",
                "actor": "scheduler",
            },
        ),
        (
            events.TaskStateChanged(
                job_id=job_id, task_id=5, role="worker", index=1, state="running", ended=False
            ),
            {
                "type": "task",
                "task": 5,
                "role": "worker",
                "index": 1,
                "state": "running",
                "message": "",
            },
        ),
        (
            events.MetricPointsIngested(job_id=job_id, points=(point,)),
            {"type": "metrics", "points": [point]},
        ),
        (
            events.LogLinesIngested(job_id=job_id, lines=(line,)),
            {"type": "logs", "lines": [line]},
        ),
    ]


def _watch(
    user: User, job_id: int, scenario: Callable[[WebsocketCommunicator], Awaitable[None]]
) -> None:
    """Run `scenario` with a browser connected to the job's feed as `user`."""

    async def run() -> None:
        browser = WebsocketCommunicator(JobStreamConsumer.as_asgi(), f"/ws/jobs/{job_id}/")
        browser.scope["user"] = user
        browser.scope["url_route"] = {"kwargs": {"job_id": job_id}}
        connected, _ = await browser.connect()
        assert connected
        try:
            await scenario(browser)
        finally:
            await browser.disconnect()

    async_to_sync(run)()


@pytest.fixture
def watched() -> tuple[User, Job]:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    return alice, make_job(alice)


def test_each_event_kind_reaches_the_browser_as_the_page_reads_it(
    watched: tuple[User, Job],
) -> None:
    alice, job = watched

    async def scenario(browser: WebsocketCommunicator) -> None:
        for event, expected in _feed_cases(job.pk):
            await database_sync_to_async(live.on_event)(event)
            assert await browser.receive_json_from(timeout=2) == expected

    _watch(alice, job.pk, scenario)


def test_events_of_other_jobs_and_of_no_job_are_not_sent(watched: tuple[User, Job]) -> None:
    alice, job = watched
    unrelated: list[events.Event] = [
        *(event for event, _ in _feed_cases(job.pk + 1000)),
        events.JobSubmitted(job_id=job.pk, team_id=job.team_id),
        events.JobScaled(job_id=job.pk, workers=2),
        events.NodeTasksChanged(node_ids=(1,)),
        events.NodeChanged(node_id=1, reason="node.cordon"),
        events.QuotaChanged(team_id=job.team_id),
        events.MetricPointsIngested(job_id=job.pk, points=()),
        events.LogLinesIngested(job_id=job.pk, lines=()),
    ]

    async def scenario(browser: WebsocketCommunicator) -> None:
        for event in unrelated:
            await database_sync_to_async(live.on_event)(event)
        assert await browser.receive_nothing(timeout=0.3)

    _watch(alice, job.pk, scenario)


def test_ingested_metrics_and_logs_are_pushed_as_stored(watched: tuple[User, Job]) -> None:
    """The agent gateway only ingests; the rows it gets back are what the browser gets."""
    alice, job = watched
    task = Task.objects.create(job=job, role=TaskRole.WORKER, index=0, cpu=1, memory_mb=512)
    now = timezone.now()
    stored: dict[str, list[dict[str, Any]]] = {}

    def ingest() -> None:
        points = [{"step": 1, "values": {"loss": 0.25, "bad": float("nan")}}]
        stored["metrics"] = ingest_metrics(task=task, points=points, now=now)
        stored["logs"] = ingest_logs(task=task, stream="stderr", lines=["boom"], now=now)

    async def scenario(browser: WebsocketCommunicator) -> None:
        await database_sync_to_async(ingest)()
        assert await browser.receive_json_from(timeout=2) == {
            "type": "metrics",
            "points": stored["metrics"],
        }
        assert await browser.receive_json_from(timeout=2) == {
            "type": "logs",
            "lines": stored["logs"],
        }

    _watch(alice, job.pk, scenario)
    assert [p["name"] for p in stored["metrics"]] == ["loss"]  # NaN is dropped
    assert stored["logs"][0]["source"] == "worker-0" and stored["logs"][0]["line"] == "boom"


def test_a_user_who_may_not_see_the_job_gets_no_feed(watched: tuple[User, Job]) -> None:
    _, job = watched
    mallory = make_user("mallory")

    async def run() -> None:
        browser = WebsocketCommunicator(JobStreamConsumer.as_asgi(), f"/ws/jobs/{job.pk}/")
        browser.scope["user"] = mallory
        browser.scope["url_route"] = {"kwargs": {"job_id": job.pk}}
        connected, code = await browser.connect()
        assert not connected and code == 4403

    async_to_sync(run)()
