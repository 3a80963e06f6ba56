"""The agent gateway's half of the protocol: strict parsing at the door, typed calls after,
and agent notices from domain events."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import override_settings
from django.utils import timezone
from trainhub.agents import notify
from trainhub.agents.services import ProtocolError, handle_message
from trainhub.events import JobScaled, NodeTasksChanged
from trainhub.jobs.choices import TaskState
from trainhub.scheduling.services import run_cycle
from trainhub.telemetry.logchunks import stored_lines
from trainhub.telemetry.models import LogChunk
from trainhub.tenancy.choices import Role

from ps_runtime.taskenv import Role as TaskRole
from ps_runtime.taskenv import TaskEnvironment

from ..agent_sim import agent_tasks
from ..factories import make_job, make_node, make_team, make_user


@pytest.fixture
def placed(db: Any) -> dict[str, Any]:
    """A job placed on one node, its tasks as that node's agent sees them."""
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, credential = make_node(cpus=4, memory_mb=8192)
    job = make_job(alice)
    run_cycle(now=timezone.now())
    tasks = {t["role"]: t for t in agent_tasks(credential)["tasks"]}
    return {"node": node, "job": job, "tasks": tasks, "credential": credential}


def test_each_desired_env_is_a_task_environment_the_task_accepts(placed: dict[str, Any]) -> None:
    envs = {role: TaskEnvironment.from_env(t["env"]) for role, t in placed["tasks"].items()}
    job = placed["job"]
    coordinator = envs["coordinator"]
    assert coordinator.role == TaskRole.COORDINATOR and coordinator.job_id == str(job.pk)
    assert coordinator.entrypoint == job.spec["entrypoint"]
    assert coordinator.cluster is not None
    assert coordinator.cluster.ps == (envs["ps"].bind,)
    assert coordinator.cluster.worker == (envs["worker"].bind,)
    assert {e.job_token for e in envs.values()} == {job.runtime_token}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"type": "heartbeat", "usage": {"cpu_percent": float("nan")}}, "usage.cpu_percent"),
        ({"type": "heartbeat", "usage": {"cpu_percent": float("inf")}}, "usage.cpu_percent"),
        ({"type": "heartbeat", "tasks": [{"id": True, "attempt": 1, "pid": 3}]}, "tasks[0].id"),
        ({"type": "tasks_changed"}, "type 'tasks_changed'"),
        ({"type": "shutdown"}, "type"),
        ("heartbeat", "message"),
    ],
)
def test_a_refused_heartbeat_changes_nothing(
    placed: dict[str, Any], message: Any, field: str
) -> None:
    node = placed["node"]
    before = (node.last_seen, node.usage)
    with pytest.raises(ProtocolError) as info:
        handle_message(node_id=node.pk, message=message, now=timezone.now())
    assert str(info.value).startswith(field + " ")
    node.refresh_from_db()
    assert (node.last_seen, node.usage) == before


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"state": "exploded"}, "state"),
        ({"attempt": "1"}, "attempt"),
        ({"exit_code": 1.0}, "exit_code"),
        ({"exit_code": True}, "exit_code"),
    ],
)
def test_a_refused_status_changes_nothing(
    placed: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    worker = placed["tasks"]["worker"]
    message = {"type": "task_status", "id": worker["id"], "attempt": 1, "state": "failed", **change}
    with pytest.raises(ProtocolError, match=f"^{field} "):
        handle_message(node_id=placed["node"].pk, message=message, now=timezone.now())
    assert placed["job"].tasks.get(pk=worker["id"]).state == TaskState.ASSIGNED


def test_reports_about_another_nodes_task_are_ignored(placed: dict[str, Any]) -> None:
    other, _ = make_node("node-2")
    worker = placed["tasks"]["worker"]
    logs = {"type": "logs", "id": worker["id"], "attempt": 1, "stream": "stdout", "lines": ["x"]}
    handle_message(node_id=other.pk, message=logs, now=timezone.now())
    assert not LogChunk.objects.exists()
    handle_message(node_id=placed["node"].pk, message=logs, now=timezone.now())
    assert [(x.stream, x.line) for x in stored_lines()] == [("stdout", "x")]


def test_node_tasks_changed_reaches_each_nodes_group() -> None:
    layer = get_channel_layer()
    assert layer is not None
    channels = {node_id: async_to_sync(layer.new_channel)() for node_id in (5, 6, 7)}
    for node_id, channel in channels.items():
        async_to_sync(layer.group_add)(notify.node_group(node_id), channel)

    notify.on_event(NodeTasksChanged(node_ids=(5, 7, 5)))
    notify.on_event(JobScaled(job_id=1, workers=2))  # not for agents: ignored
    for node_id in (5, 7):
        message = async_to_sync(layer.receive)(channels[node_id])
        assert message == {"type": notify.TASKS_CHANGED}
    for node_id in (5, 6, 7):  # exactly one notice each for 5 and 7, none for 6
        with pytest.raises(TimeoutError):
            async_to_sync(_receive_within)(layer, channels[node_id], 0.1)


async def _receive_within(layer: Any, channel: str, seconds: float) -> Any:
    import asyncio

    async with asyncio.timeout(seconds):
        return await layer.receive(channel)


@override_settings(CHANNEL_LAYERS={})
def test_without_a_channel_layer_notices_are_a_no_op() -> None:
    notify.on_event(NodeTasksChanged(node_ids=(1,)))


def test_a_heartbeat_stores_gpu_load_and_ports_in_the_node_usage(db: Any) -> None:
    node, _ = make_node(cpus=4, memory_mb=8192)
    gpu = {"index": 0, "utilization_percent": 87.0, "memory_used_mb": 61234}
    handle_message(
        node_id=node.pk,
        message={
            "type": "heartbeat",
            "usage": {"cpu_percent": 5},
            "gpus": [gpu],
            "ports_in_use": [8080, 24000],
        },
        now=timezone.now(),
    )
    node.refresh_from_db()
    assert node.usage == {"cpu_percent": 5, "gpus": [gpu], "ports_in_use": [8080, 24000]}
