"""Playing a node agent against the real gateway: fetch desired tasks, report statuses
and metrics.

Both go through the runtime's own protocol types, so every test that uses these also
checks that what the server sends is what an agent accepts, and the other way round.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.agents.services import handle_message

from ps_runtime.agent.protocol import (
    MetricPoint,
    Metrics,
    ReportedState,
    TaskKey,
    TaskStatus,
    parse_desired_tasks,
)


def agent_tasks(credential: str) -> dict[str, Any]:
    response = APIClient().get("/api/v1/agent/tasks/", HTTP_AUTHORIZATION=f"Node {credential}")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    parse_desired_tasks(body)  # the agent's strict parser accepts what the server sends
    return body


def report(node_id: int, task: dict[str, Any], state: str, exit_code: int | None = None) -> None:
    status = TaskStatus(TaskKey(task["id"], task["attempt"]), ReportedState(state), exit_code)
    handle_message(node_id=node_id, now=timezone.now(), message=status.to_wire())


def report_metrics(node_id: int, task: dict[str, Any], *points: MetricPoint) -> dict[str, Any]:
    """Send `points` as the agent does (`Metrics.to_wire`: columns per series); returns
    the message sent."""
    message = Metrics(TaskKey(task["id"], task["attempt"]), points).to_wire()
    handle_message(node_id=node_id, now=timezone.now(), message=message)
    return message
