"""Translating agent messages into calls on the nodes, jobs and telemetry services."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from trainhub.jobs.channels import send_to_job
from trainhub.jobs.choices import TaskState
from trainhub.jobs.models import Task
from trainhub.jobs.services import record_task_status, settle_unstarted_tasks
from trainhub.nodes.services import record_heartbeat
from trainhub.telemetry.services import ingest_logs, ingest_metrics

_REPORTABLE = {TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED}


class BadMessage(ValueError):
    """The agent sent something that does not follow docs/protocol.md."""


def _int(message: dict[str, Any], key: str) -> int:
    value = message.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadMessage(f"'{key}' must be an integer")
    return value


def _own_task(node_id: int, message: dict[str, Any]) -> Task | None:
    return Task.objects.filter(
        pk=_int(message, "id"), attempt=_int(message, "attempt"), node_id=node_id
    ).first()


def handle_message(*, node_id: int, message: dict[str, Any], now: datetime) -> None:
    """Apply one message from the agent of `node_id`."""
    kind = message.get("type")
    if kind == "heartbeat":
        usage = message.get("usage")
        record_heartbeat(node_id=node_id, usage=usage if isinstance(usage, dict) else {}, now=now)
        live = message.get("tasks")
        if isinstance(live, list):
            settle_unstarted_tasks(
                node_id=node_id,
                live={(t.get("id"), t.get("attempt")) for t in live if isinstance(t, dict)},
                now=now,
            )
    elif kind == "task_status":
        state = message.get("state")
        if state not in _REPORTABLE:
            raise BadMessage(f"unknown task state {state!r}")
        exit_code = message.get("exit_code")
        record_task_status(
            node_id=node_id,
            task_id=_int(message, "id"),
            attempt=_int(message, "attempt"),
            state=TaskState(state),
            exit_code=exit_code if isinstance(exit_code, int) else None,
            message=str(message.get("message") or ""),
            now=now,
        )
    elif kind == "metrics":
        task = _own_task(node_id, message)
        points = message.get("points")
        if task is not None and isinstance(points, list):
            flat = ingest_metrics(task=task, points=points, now=now)
            if flat:
                send_to_job(task.job_id, {"type": "metrics.points", "points": flat})
    elif kind == "logs":
        task = _own_task(node_id, message)
        lines = message.get("lines")
        if task is not None and isinstance(lines, list):
            rows = ingest_logs(
                task=task, stream=str(message.get("stream", "stdout")), lines=lines, now=now
            )
            send_to_job(task.job_id, {"type": "log.lines", "lines": rows})
    else:
        raise BadMessage(f"unknown message type {kind!r}")
