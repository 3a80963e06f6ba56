"""Translating agent messages into calls on the nodes, jobs and telemetry services.

A message is parsed once, strictly, by the protocol module the agent itself uses
(`ps_runtime.agent.protocol`); from there on only typed values travel. What browsers
see of metrics and logs is telemetry's business: its ingest functions publish the
events that the live feed turns into pushes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, assert_never

from ps_runtime.agent.protocol import (
    Heartbeat,
    Logs,
    Metrics,
    ProtocolError,
    TaskKey,
    TaskStatus,
    parse_from_agent,
)
from trainhub.jobs.choices import TaskState
from trainhub.jobs.models import Task
from trainhub.jobs.services import record_task_status, settle_unstarted_tasks
from trainhub.nodes.services import record_heartbeat
from trainhub.telemetry.services import ingest_logs, ingest_metrics

__all__ = ["ProtocolError", "handle_message"]


def handle_message(*, node_id: int, message: object, now: datetime) -> None:
    """Apply one message (decoded JSON) from the agent of `node_id`.

    Raises:
        ProtocolError: the message does not follow docs/protocol.md; nothing changed.
    """
    parsed = parse_from_agent(message)
    if isinstance(parsed, Heartbeat):
        _heartbeat(node_id, parsed, now)
    elif isinstance(parsed, TaskStatus):
        _task_status(node_id, parsed, now)
    elif isinstance(parsed, Metrics):
        _metrics(node_id, parsed, now)
    elif isinstance(parsed, Logs):
        _logs(node_id, parsed, now)
    else:
        assert_never(parsed)


def _heartbeat(node_id: int, heartbeat: Heartbeat, now: datetime) -> None:
    usage: dict[str, Any] = dict(heartbeat.usage)
    if heartbeat.gpus:
        usage["gpus"] = [dict(g) for g in heartbeat.gpus]
    if heartbeat.ports_in_use:
        usage["ports_in_use"] = list(heartbeat.ports_in_use)
    isolation = heartbeat.isolation.value if heartbeat.isolation is not None else None
    record_heartbeat(
        node_id=node_id,
        usage=usage,
        now=now,
        isolation=isolation,
        agent_version=heartbeat.agent_version,
    )
    settle_unstarted_tasks(
        node_id=node_id, live={(t.task.id, t.task.attempt) for t in heartbeat.tasks}, now=now
    )


def _task_status(node_id: int, status: TaskStatus, now: datetime) -> None:
    record_task_status(
        node_id=node_id,
        task_id=status.task.id,
        attempt=status.task.attempt,
        state=TaskState(status.state.value),
        exit_code=status.exit_code,
        message=status.message,
        now=now,
    )


def _own_task(node_id: int, key: TaskKey) -> Task | None:
    """The task attempt, if it runs on this node (another node's reports are ignored)."""
    return Task.objects.filter(pk=key.id, attempt=key.attempt, node_id=node_id).first()


def _metrics(node_id: int, metrics: Metrics, now: datetime) -> None:
    task = _own_task(node_id, metrics.task)
    if task is not None and metrics.points:
        ingest_metrics(task=task, points=[p.to_wire() for p in metrics.points], now=now)


def _logs(node_id: int, logs: Logs, now: datetime) -> None:
    task = _own_task(node_id, logs.task)
    if task is not None:
        ingest_logs(task=task, stream=logs.stream.value, lines=list(logs.lines), now=now)
