"""Parsing `GET /api/v1/agent/tasks/` (docs/protocol.md §1)."""

from __future__ import annotations

from typing import Any

import pytest

from ps_runtime.agent.protocol import (
    DEFAULT_STOP_GRACE_SECONDS,
    ProtocolError,
    parse_desired_tasks,
)


def _task(**extra: Any) -> dict[str, Any]:
    return {
        "id": 33,
        "job_id": 12,
        "role": "coordinator",
        "index": 0,
        "attempt": 1,
        "resources": {"cpu": 1.0},
        "env": {"TRAINHUB_ROLE": "coordinator"},
        **extra,
    }


def test_per_task_stop_grace_is_optional() -> None:
    desired = parse_desired_tasks(
        {
            "stop_grace_seconds": 5,
            "tasks": [
                _task(stop_grace_seconds=60),
                _task(id=34, stop_grace_seconds=None),
                _task(id=35),
                _task(id=36, stop_grace_seconds=0.5),
            ],
        }
    )
    assert desired.stop_grace_seconds == 5.0
    assert [t.stop_grace_seconds for t in desired.tasks] == [60.0, None, None, 0.5]


def test_response_level_stop_grace_defaults() -> None:
    for body in ({"tasks": []}, {"tasks": [], "stop_grace_seconds": None}):
        assert parse_desired_tasks(body).stop_grace_seconds == DEFAULT_STOP_GRACE_SECONDS


@pytest.mark.parametrize("bad", [-1, "60", True, [], float("nan"), float("inf")])
def test_bad_stop_grace_is_a_protocol_error(bad: Any) -> None:
    with pytest.raises(ProtocolError, match="task stop_grace_seconds must be a non-negative"):
        parse_desired_tasks({"tasks": [_task(stop_grace_seconds=bad)]})
    with pytest.raises(ProtocolError, match=r"^stop_grace_seconds must be a non-negative"):
        parse_desired_tasks({"tasks": [], "stop_grace_seconds": bad})
