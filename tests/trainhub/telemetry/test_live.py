"""The browser's live feed: each domain event reaches a job's watchers as `job.js` reads it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
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
from trainhub.telemetry.logchunks import store_lines
from trainhub.telemetry.services import ingest_logs, ingest_metrics
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db(transaction=True)

TIME = "2026-01-01T12:00:00+00:00"
STARTED = datetime(2026, 1, 1, 11, 0, tzinfo=UTC)
FINISHED = datetime(2026, 1, 1, 11, 30, tzinfo=UTC)
# The watched job's row while the cases run: every `state` message carries it as stored.
ROW = {
    "state": "failed",
    "message": "worker 0 exited with code 3",
    "started_at": STARTED,
    "finished_at": FINISHED,
    "restarts": 2,
    "infra_restarts": 4,
    "preemptions": 1,
    "target_workers": 3,
}
FIELDS = {
    "type": "state",
    "state": "failed",
    "message": "worker 0 exited with code 3",
    "pending_reason": "",
    "started_at": "2026-01-01T11:00:00+00:00",
    "finished_at": "2026-01-01T11:30:00+00:00",
    "restarts": 2,
    "infra_restarts": 4,
    "preemptions": 1,
    "workers": 3,
}


def _history(job_id: int, kind: str) -> events.JobEventRecorded:
    return events.JobEventRecorded(
        job_id=job_id, time=TIME, kind=kind, reason="r", actor="scheduler", to_state=""
    )


def _history_message(kind: str) -> dict[str, Any]:
    return {
        "type": "event",
        "time": TIME,
        "kind": kind,
        "from_state": "",
        "to_state": "",
        "reason": "r",
        "actor": "scheduler",
    }


def _feed_cases(job_id: int) -> list[tuple[events.Event, list[dict[str, Any]]]]:
    """(event, what the browser receives) for every event kind the feed carries."""
    point = {"name": "loss", "step": 3, "value": 0.5, "time": TIME}
    line = {"id": 9, "source": "worker-0", "stream": "stdout", "line": "hi", "time": TIME}
    result = {
        "id": 10,
        "source": "coordinator-0",
        "stream": "stdout",
        "line": '{"result": {"rmse": 0.91234567, "epochs": 5}}',
        "time": TIME,
    }
    return [
        # What the event says is already in the row, which may be newer still: the row wins.
        (events.JobStateChanged(job_id=job_id, state="running", message=""), [FIELDS]),
        (events.JobPendingReasonChanged(job_id=job_id, pending_reason="no room"), [FIELDS]),
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
            [
                {
                    "type": "event",
                    "time": TIME,
                    "kind": "state",
                    "from_state": "pending",
                    "to_state": "starting",
                    "reason": "placed on node 1",
                    "actor": "scheduler",
                }
            ],  # its JobStateChanged sends the fields
        ),
        # A restart changes the job's counters without a state change.
        (_history(job_id, "restart"), [_history_message("restart"), FIELDS]),
        (
            events.TaskStateChanged(
                job_id=job_id, task_id=5, role="worker", index=1, state="running", ended=False
            ),
            [
                {
                    "type": "task",
                    "task": 5,
                    "role": "worker",
                    "index": 1,
                    "state": "running",
                    "message": "",
                }
            ],
        ),
        (
            events.MetricPointsIngested(job_id=job_id, points=(point,)),
            [{"type": "metrics", "points": [point]}],
        ),
        (
            events.LogLinesIngested(job_id=job_id, lines=(line,)),
            [{"type": "logs", "lines": [line]}],
        ),
        (
            events.LogLinesIngested(job_id=job_id, lines=(line, result)),
            [
                {"type": "logs", "lines": [line, result]},
                {"type": "result", "rows": [["rmse", "0.912346"], ["epochs", "5"]]},
            ],
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
            first = await browser.receive_json_from(timeout=2)  # the job's fields, at once
            assert first["type"] == "state", first
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
    Job.objects.filter(pk=job.pk).update(**ROW)

    async def scenario(browser: WebsocketCommunicator) -> None:
        for event, expected in _feed_cases(job.pk):
            await database_sync_to_async(live.on_event)(event)
            got = [await browser.receive_json_from(timeout=2) for _ in expected]
            assert got == expected, event
        assert await browser.receive_nothing(timeout=0.3)

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


def test_a_browser_that_connects_gets_the_job_as_stored_and_its_result(
    watched: tuple[User, Job],
) -> None:
    """What changed between the page's render and its socket, or while a page was away."""
    alice, job = watched
    Job.objects.filter(pk=job.pk).update(**ROW)
    store_lines(
        job_id=job.pk,
        task_id=None,
        source="coordinator-0",
        stream="stdout",
        texts=['{"result": 0.5}'],
        time=STARTED,
    )

    async def run() -> None:
        browser = WebsocketCommunicator(JobStreamConsumer.as_asgi(), f"/ws/jobs/{job.pk}/")
        browser.scope["user"] = alice
        browser.scope["url_route"] = {"kwargs": {"job_id": job.pk}}
        connected, _ = await browser.connect()
        assert connected
        assert await browser.receive_json_from(timeout=2) == FIELDS
        assert await browser.receive_json_from(timeout=2) == {
            "type": "result",
            "rows": [["result", "0.5"]],
        }
        assert await browser.receive_nothing(timeout=0.3)
        await browser.disconnect()

    async_to_sync(run)()
