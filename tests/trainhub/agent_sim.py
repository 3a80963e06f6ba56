"""Playing a node agent against the real gateway: fetch desired tasks, report statuses."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.agents.services import handle_message


def agent_tasks(credential: str) -> dict[str, Any]:
    response = APIClient().get("/api/v1/agent/tasks/", HTTP_AUTHORIZATION=f"Node {credential}")
    assert response.status_code == 200, response.content
    return response.json()


def report(node_id: int, task: dict[str, Any], state: str, exit_code: int | None = None) -> None:
    handle_message(
        node_id=node_id,
        now=timezone.now(),
        message={
            "type": "task_status",
            "id": task["id"],
            "attempt": task["attempt"],
            "state": state,
            "exit_code": exit_code,
            "message": "",
        },
    )
