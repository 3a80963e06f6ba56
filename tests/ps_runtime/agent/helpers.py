"""Shared helpers for the agent tests."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ps_runtime.agent.protocol import DesiredTask
from ps_runtime.taskenv import ROLE, Role

FAKE_TASK = str(Path(__file__).with_name("fake_task.py"))
FAKE_COMMAND = (sys.executable, FAKE_TASK)


def fake_task(
    task_id: int = 31,
    attempt: int = 1,
    mode: str = "exit",
    *,
    cpu: float = 1.0,
    memory_mb: int = 0,
    gpu_indices: tuple[int, ...] = (),
    **env: str,
) -> DesiredTask:
    return DesiredTask(
        id=task_id,
        attempt=attempt,
        job_id=12,
        role=Role.PS,
        index=0,
        cpu=cpu,
        memory_mb=memory_mb,
        gpu_indices=gpu_indices,
        env={ROLE.name: Role.PS.value, "TRAINHUB_FAKE_MODE": mode, **env},
    )


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def pid_alive(pid: int) -> bool:
    """True while the pid is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def statuses(messages: Iterable[dict[str, Any]]) -> list[tuple[int, int, str]]:
    return [(m["id"], m["attempt"], m["state"]) for m in messages if m["type"] == "task_status"]


def log_lines(messages: Iterable[dict[str, Any]], stream: str) -> list[str]:
    return [
        line
        for m in messages
        if m["type"] == "logs" and m["stream"] == stream
        for line in m["lines"]
    ]


def metric_points(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points of columnar metrics messages, one `{"step", "time", "values": {name:
    value}}` each (series by series; time as ISO text, None when the batch has none)."""
    points = []
    for m in messages:
        if m["type"] != "metrics":
            continue
        for name, columns in m["series"].items():
            times = columns.get("times") or [None] * len(columns["steps"])
            for step, value, us in zip(columns["steps"], columns["values"], times, strict=True):
                when = None if us is None else (_EPOCH + timedelta(microseconds=us)).isoformat()
                points.append({"step": step, "time": when, "values": {name: value}})
    return points


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cleanup_pid(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except OSError:
        pass


def require_root() -> None:
    """Skip a test that needs a root agent when not root; under CI=true (which runs as
    root, the way production agents do) fail instead: the sandbox tests never skip there."""
    import pytest

    if os.geteuid() == 0:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI=true runs the sandbox tests as root; this run is not root")
    pytest.skip("needs a root agent")
