"""Delivery on the real `/ws/agent/` socket: numbered messages acknowledged, bad items
refused alone while their neighbours are stored, repeated statuses applied once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from trainhub.asgi import application
from trainhub.jobs.choices import JobState, TaskState
from trainhub.jobs.models import Job, Task
from trainhub.scheduling.services import run_cycle
from trainhub.telemetry.chunks import stored_points
from trainhub.telemetry.logchunks import stored_lines
from trainhub.telemetry.models import LogChunk
from trainhub.tenancy.choices import Role

from ..agent_sim import agent_tasks
from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db(transaction=True)

WHEN = "2025-03-01T12:00:00+00:00"


def _placed() -> tuple[str, Job, dict[str, dict[str, Any]]]:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    _, credential = make_node(cpus=4, memory_mb=8192)
    job = make_job(alice)
    run_cycle(now=timezone.now())
    tasks = {t["role"]: t for t in agent_tasks(credential)["tasks"]}
    return credential, job, tasks


async def _connect(credential: str) -> WebsocketCommunicator:
    agent = WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Node {credential}".encode())]
    )
    connected, _ = await agent.connect()
    assert connected
    return agent


async def _until_acked(agent: WebsocketCommunicator, seq: int) -> list[dict[str, Any]]:
    """Frames received until the ack covering `seq`; the error frames among them."""
    errors = []
    while True:
        frame = await agent.receive_json_from(timeout=10)
        if frame["type"] == "error":
            errors.append(frame)
        elif frame["type"] == "ack" and frame["seq"] >= seq:
            return errors


def _point(step: Any, value: Any = 0.5, time: Any = WHEN) -> dict[str, Any]:
    return {"step": step, "time": time, "values": {"loss": value}}


def _run(scenario: Callable[[], Awaitable[None]]) -> None:
    async_to_sync(scenario)()


def test_each_bad_item_is_refused_alone_and_its_neighbours_are_stored() -> None:
    credential, job, tasks = _placed()
    worker = tasks["worker"]
    key = {"id": worker["id"], "attempt": worker["attempt"]}

    async def scenario() -> None:
        agent = await _connect(credential)
        points = [
            _point(1),
            _point(2, time="yesterday"),  # a time that does not parse
            _point(-1),  # a negative step
            _point(10**30),  # a step too large for anything
            _point(3, value=float("nan")),
            _point(4, value=float("inf")),
            _point(5),
        ]
        await agent.send_json_to({"type": "metrics", **key, "points": points, "seq": 1})
        await agent.send_json_to(
            {"type": "metrics", "id": 999_999, "attempt": 1, "points": [_point(9)], "seq": 2}
        )
        oversize = [_point(100 + i) for i in range(1001)]
        await agent.send_json_to({"type": "metrics", **key, "points": oversize, "seq": 3})
        lines = ["before", "nul\x00inside", "after"]
        await agent.send_json_to(
            {"type": "logs", **key, "stream": "stdout", "lines": lines, "seq": 4}
        )
        await agent.send_json_to({"type": "metrics", **key, "points": [_point(6)], "seq": 5})
        errors = await _until_acked(agent, 5)
        await agent.disconnect(timeout=10)
        refused = sorted((e["seq"], e["field"]) for e in errors)
        assert refused == [
            (1, "points[1].time"),
            (1, "points[2].step"),
            (1, "points[3].step"),
            (1, "points[4].values.loss"),
            (1, "points[5].values.loss"),
            (2, "id"),
            (3, "points"),
        ], errors
        by_field = {e["field"]: e["message"] for e in errors}
        assert "must be an integer >= 0, got -1" in by_field["points[2].step"]
        assert "at most 1000 items, got 1001" in by_field["points"]

    _run(scenario)
    assert [s for _, _, _, s, _, _ in stored_points([job.pk])] == [1, 5, 6]
    assert [x.line for x in stored_lines(LogChunk.objects.filter(job=job))] == [
        "before",
        "nul\ufffdinside",
        "after",
    ]


def test_a_status_sent_again_after_a_cut_connection_is_applied_once() -> None:
    credential, job, tasks = _placed()
    coordinator = tasks["coordinator"]
    done = {"type": "task_status", "id": coordinator["id"], "attempt": 1, "state": "succeeded"}

    async def send_all(agent: WebsocketCommunicator) -> None:
        for seq, task in enumerate(tasks.values(), start=1):
            status = {"type": "task_status", "id": task["id"], "attempt": 1, "state": "running"}
            await agent.send_json_to({**status, "seq": seq})
        await agent.send_json_to({**done, "exit_code": 0, "seq": len(tasks) + 1})

    async def first() -> None:
        agent = await _connect(credential)
        await send_all(agent)
        await _until_acked(agent, len(tasks) + 1)
        await agent.disconnect(timeout=10)  # as if the ack had been lost with the connection

    _run(first)
    started = dict(Task.objects.filter(job=job).values_list("role", "started_at"))
    finished = Task.objects.get(job=job, role="coordinator").finished_at
    events = job.events.count()

    async def again() -> None:
        # The agent's next connection sends everything unacknowledged again, numbered anew.
        agent = await _connect(credential)
        await send_all(agent)
        await _until_acked(agent, len(tasks) + 1)
        await agent.disconnect(timeout=10)

    _run(again)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    states = list(job.events.filter(kind="state").values_list("to_state", flat=True))
    assert states == ["starting", "running", "succeeded"]
    assert job.events.count() == events  # nothing recorded twice
    assert dict(Task.objects.filter(job=job).values_list("role", "started_at")) == started
    assert Task.objects.get(job=job, role="coordinator").finished_at == finished
    assert Task.objects.get(job=job, role="coordinator").state == TaskState.SUCCEEDED


def test_heartbeats_are_acknowledged_while_a_flood_of_points_is_stored() -> None:
    """The data lane queues; a heartbeat's ack does not wait for the points before it."""
    credential, job, tasks = _placed()
    worker = tasks["worker"]
    key = {"id": worker["id"], "attempt": worker["attempt"]}

    async def scenario() -> None:
        agent = await _connect(credential)
        seq = 0
        for batch in range(20):
            seq += 1
            points = [_point(batch * 1000 + i) for i in range(1000)]
            await agent.send_json_to({"type": "metrics", **key, "points": points, "seq": seq})
        seq += 1
        await agent.send_json_to({"type": "heartbeat", "usage": {"cpu_percent": 1}, "seq": seq})
        while True:  # the heartbeat's answer comes while the points are still being stored
            frame = await agent.receive_json_from(timeout=10)
            assert frame["type"] == "ack" and frame["seq"] < seq, frame
            if seq in frame.get("also", []):
                break
        assert await _until_acked(agent, seq) == []  # then every batch, in order
        await agent.disconnect(timeout=10)

    _run(scenario)
    assert len(stored_points([job.pk])) == 20_000


def test_a_node_seen_recently_is_not_lost_after_a_reconnect() -> None:
    """Heartbeats on a new connection keep the node fresh (sanity of the lane split)."""
    _, credential = make_node(cpus=2, memory_mb=1024)

    async def scenario() -> None:
        agent = await _connect(credential)
        await agent.send_json_to({"type": "heartbeat", "usage": {"cpu_percent": 7}, "seq": 1})
        await _until_acked(agent, 1)
        await agent.disconnect(timeout=10)

    _run(scenario)
    from trainhub.nodes.models import Node

    node = Node.objects.get()
    assert node.usage["cpu_percent"] == 7
    assert node.last_seen is not None
    assert timezone.now() - node.last_seen < timedelta(seconds=30)


def test_a_failed_status_is_classified_from_the_output_sent_before_it() -> None:
    """Logs go to the data lane, statuses are applied at once: a failed status waits for
    the output queued before it, whose traceback names its cause (`jobs.causes`)."""
    credential, job, tasks = _placed()
    coordinator = tasks["coordinator"]
    key = {"id": coordinator["id"], "attempt": 1}
    traceback = [
        "Traceback (most recent call last):",
        '  File "/srv/task/code/train.py", line 12, in main',
        "ValueError: bad learning rate",
    ]

    async def scenario() -> None:
        agent = await _connect(credential)
        await agent.send_json_to({"type": "task_status", **key, "state": "running", "seq": 1})
        # A flood of points first, so that the lane is still busy when the status comes.
        for seq in range(2, 12):
            points = [_point(seq * 1000 + i) for i in range(1000)]
            await agent.send_json_to({"type": "metrics", **key, "points": points, "seq": seq})
        logs = {"type": "logs", **key, "stream": "stderr", "lines": traceback, "seq": 12}
        await agent.send_json_to(logs)
        failed = {"type": "task_status", **key, "state": "failed", "exit_code": 1, "seq": 13}
        await agent.send_json_to(failed)
        assert await _until_acked(agent, 13) == []
        await agent.disconnect(timeout=10)

    _run(scenario)
    task = Task.objects.get(pk=coordinator["id"])
    assert (task.end_cause, task.state) == ("user_exception", TaskState.FAILED)
    job.refresh_from_db()
    assert job.last_error == "ValueError at train.py:12"


def _flood_then_end(key: dict[str, Any], lines: list[str], state: str) -> list[dict[str, Any]]:
    """A running status, 10,000 points, a log line and the status `state` (seq 13)."""
    frames: list[dict[str, Any]] = [{"type": "task_status", **key, "state": "running", "seq": 1}]
    for seq in range(2, 12):  # the data lane is still busy when the status comes
        points = [_point(seq * 1000 + i) for i in range(1000)]
        frames.append({"type": "metrics", **key, "points": points, "seq": seq})
    frames.append({"type": "logs", **key, "stream": "stdout", "lines": lines, "seq": 12})
    frames.append({"type": "task_status", **key, "state": state, "exit_code": 0, "seq": 13})
    return frames


def test_a_job_seen_succeeded_has_the_output_sent_before_its_status() -> None:
    """A succeeded status waits for the data lane too: whoever sees the task succeeded
    reads its last points and its result line (e2e tests reading a trial's result did not,
    now and then)."""
    credential, job, tasks = _placed()
    coordinator = tasks["coordinator"]
    key = {"id": coordinator["id"], "attempt": 1}
    result = '{"result": {"steps": 4}}'

    def seen() -> tuple[str, bool, int]:
        return (
            Task.objects.get(pk=coordinator["id"]).state,
            any(x.line == result for x in stored_lines(LogChunk.objects.filter(job=job))),
            len(stored_points([job.pk])),
        )

    async def scenario() -> None:
        agent = await _connect(credential)
        for frame in _flood_then_end(key, [result], "succeeded"):
            await agent.send_json_to(frame)
        # The first moment the task is seen ended, everything sent before it is stored.
        deadline = asyncio.get_running_loop().time() + 20
        state = await database_sync_to_async(seen)()
        while state[0] != TaskState.SUCCEEDED and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
            state = await database_sync_to_async(seen)()
        assert state == (TaskState.SUCCEEDED, True, 10_000)
        assert await _until_acked(agent, 13) == []
        await agent.disconnect(timeout=10)

    _run(scenario)


def test_a_heartbeat_is_answered_while_an_ended_status_waits_for_the_data_lane() -> None:
    """The status waits in a lane of its own: a heartbeat sent after it is acknowledged
    while the points ahead of the status are still being stored (the node's liveness is
    not held up by the status's wait)."""
    credential, _job, tasks = _placed()
    coordinator = tasks["coordinator"]
    key = {"id": coordinator["id"], "attempt": 1}

    async def scenario() -> None:
        agent = await _connect(credential)
        for frame in _flood_then_end(key, ["done"], "succeeded"):
            await agent.send_json_to(frame)
        beat = {"type": "heartbeat", "usage": {"cpu_percent": 3}, "seq": 14}
        await agent.send_json_to(beat)
        while True:  # the heartbeat is answered while the points are still being stored
            frame = await agent.receive_json_from(timeout=10)
            assert frame["type"] == "ack" and frame["seq"] < 12, frame
            if 14 in frame.get("also", []):
                break
        assert await _until_acked(agent, 14) == []
        await agent.disconnect(timeout=10)

    _run(scenario)
    assert Task.objects.get(pk=coordinator["id"]).state == TaskState.SUCCEEDED
