"""Stall detection through the real `/ws/agent/` socket: progress and stacks stored from
the data lane, and a stalled job's nodes told `capture_stacks` (docs/protocol.md §1)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from trainhub.agents import notify
from trainhub.asgi import application
from trainhub.events import JobStalled, StacksWanted
from trainhub.jobs.models import JobEvent
from trainhub.scheduling.services import run_cycle
from trainhub.telemetry.models import JobTelemetry
from trainhub.tenancy.choices import Role

from ..agent_sim import agent_tasks
from ..factories import make_job, make_node, make_team, make_user

pytestmark = pytest.mark.django_db(transaction=True)


def _placed() -> tuple[str, int, int, dict[str, dict[str, Any]]]:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, credential = make_node(cpus=4, memory_mb=8192)
    job = make_job(alice)
    run_cycle(now=timezone.now())
    tasks = {t["role"]: t for t in agent_tasks(credential)["tasks"]}
    return credential, node.pk, job.pk, tasks


async def _connect(credential: str) -> WebsocketCommunicator:
    agent = WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Node {credential}".encode())]
    )
    connected, _ = await agent.connect()
    assert connected
    return agent


async def _frames_until_ack(agent: WebsocketCommunicator, seq: int) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        frame = await agent.receive_json_from(timeout=10)
        if frame["type"] == "ack" and frame["seq"] >= seq:
            return frames
        frames.append(frame)


def test_progress_and_stacks_are_stored_from_the_data_lane() -> None:
    credential, _, job_id, tasks = _placed()
    coordinator = tasks["coordinator"]
    key = {"id": coordinator["id"], "attempt": coordinator["attempt"]}
    now = timezone.now()

    def item(seconds: float, **fields: Any) -> dict[str, Any]:
        return {"time": (now + timedelta(seconds=seconds)).isoformat(), **fields}

    async def scenario() -> None:
        agent = await _connect(credential)
        progress = [item(0, closures=4), item(1, phase="evaluation", state="begin")]
        await agent.send_json_to({"type": "progress", **key, "items": progress, "seq": 1})
        stacks = {"method": "py-spy", "text": "Thread 7 (idle)\n    wait (train.py:12)"}
        await agent.send_json_to({"type": "stacks", **key, **stacks, "seq": 2})
        elsewhere = {"id": 999_999, "attempt": 1, "items": [item(0, closures=1)]}
        await agent.send_json_to({"type": "progress", **elsewhere, "seq": 3})
        frames = await _frames_until_ack(agent, 3)
        await agent.disconnect(timeout=10)
        errors = [(f["seq"], f["field"]) for f in frames if f["type"] == "error"]
        assert errors == [(3, "id")]

    async_to_sync(scenario)()
    progress = JobTelemetry.objects.get(pk=job_id).progress
    assert progress["marks"] == {str(coordinator["id"]): [coordinator["attempt"], -1, 4]}
    assert progress["phases"] == {str(coordinator["id"]): [coordinator["attempt"], 1]}
    [event] = JobEvent.objects.filter(job_id=job_id, kind="stacks")
    assert event.reason == (
        "coordinator 0: Python stacks (py-spy; its log has them whole):\n"
        "Thread 7 (idle)\n    wait (train.py:12)"
    )


def test_a_stalled_jobs_nodes_are_sent_capture_stacks() -> None:
    credential, node_id, job_id, _ = _placed()

    async def scenario() -> None:
        agent = await _connect(credential)
        await agent.send_json_to({"type": "heartbeat", "usage": {}, "seq": 1})
        await _frames_until_ack(agent, 1)  # the socket has joined its node's group
        await sync_to_async(notify.on_event)(JobStalled(job_id=job_id, reason="x"))
        await sync_to_async(notify.on_event)(StacksWanted(job_id=job_id, node_ids=(node_id,)))
        assert await agent.receive_json_from(timeout=10) == {
            "type": "capture_stacks",
            "job_id": job_id,
        }
        assert await agent.receive_nothing(timeout=0.2)
        await agent.disconnect(timeout=10)

    async_to_sync(scenario)()


def test_stacks_wanted_reaches_each_nodes_group_once() -> None:
    layer = get_channel_layer()
    assert layer is not None
    channels = {node_id: async_to_sync(layer.new_channel)() for node_id in (5, 6)}
    for node_id, channel in channels.items():
        async_to_sync(layer.group_add)(notify.node_group(node_id), channel)
    notify.on_event(StacksWanted(job_id=3, node_ids=(5, 5)))
    message = async_to_sync(layer.receive)(channels[5])
    assert message == {"type": notify.STACKS_WANTED, "job_id": 3}
