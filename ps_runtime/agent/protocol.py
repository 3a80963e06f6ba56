"""Wire shapes of the agent ⇄ control-plane protocol (docs/protocol.md §1)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

ENROLL_PATH = "/api/v1/nodes/enroll/"
DESIRED_TASKS_PATH = "/api/v1/agent/tasks/"
WEBSOCKET_PATH = "/ws/agent/"

DEFAULT_STOP_GRACE_SECONDS = 5.0
# Close code the server uses on the agent socket for a bad credential.
CLOSE_UNAUTHORIZED = 4401

# task_status states
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"

STDOUT = "stdout"
STDERR = "stderr"


class ProtocolError(ValueError):
    """The control plane sent something that does not match docs/protocol.md."""


class TaskKey(NamedTuple):
    """A task attempt: a new attempt of the same id means "restart"."""

    id: int
    attempt: int


@dataclass(frozen=True)
class DesiredTask:
    """One entry of `GET /api/v1/agent/tasks/`."""

    id: int
    attempt: int
    job_id: int
    role: str
    index: int
    cpu: float = 0.0
    memory_mb: int = 0
    gpu_indices: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # SIGTERM-to-SIGKILL time when this task stops; None: the response-level value.
    stop_grace_seconds: float | None = None

    @property
    def key(self) -> TaskKey:
        return TaskKey(self.id, self.attempt)


@dataclass(frozen=True)
class DesiredTasks:
    """The complete set of tasks that should run on this node now."""

    tasks: tuple[DesiredTask, ...]
    stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS
    node_id: int | None = None


def _int(obj: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"task field {name!r} must be an integer, got {value!r}")
    return value


def _stop_grace(value: Any, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ProtocolError(f"{where} must be a non-negative number, got {value!r}")
    return float(value)


def _env_value(value: Any) -> str:
    # The contract says strings; tolerate JSON scalars/objects rather than crash a node.
    if isinstance(value, str):
        return value
    return json.dumps(value)


def parse_desired_task(obj: Any) -> DesiredTask:
    """Validate one task object from the desired-tasks response."""
    if not isinstance(obj, Mapping):
        raise ProtocolError(f"task must be an object, got {type(obj).__name__}")
    resources = obj.get("resources") or {}
    env = obj.get("env") or {}
    if not isinstance(resources, Mapping) or not isinstance(env, Mapping):
        raise ProtocolError("task 'resources' and 'env' must be objects")
    cpu = resources.get("cpu", 0) or 0
    if isinstance(cpu, bool) or not isinstance(cpu, int | float) or cpu < 0:
        raise ProtocolError(f"resources.cpu must be a non-negative number, got {cpu!r}")
    memory_mb = _int(resources, "memory_mb", 0) if resources.get("memory_mb") else 0
    gpu_indices = resources.get("gpu_indices") or []
    if not isinstance(gpu_indices, Sequence) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in gpu_indices
    ):
        raise ProtocolError(f"resources.gpu_indices must be a list of integers: {gpu_indices!r}")
    grace = obj.get("stop_grace_seconds")
    return DesiredTask(
        id=_int(obj, "id"),
        attempt=_int(obj, "attempt", 0),
        job_id=_int(obj, "job_id", 0),
        role=str(obj.get("role", "")),
        index=_int(obj, "index", 0),
        cpu=float(cpu),
        memory_mb=memory_mb,
        gpu_indices=tuple(gpu_indices),
        env={str(k): _env_value(v) for k, v in env.items()},
        stop_grace_seconds=None if grace is None else _stop_grace(grace, "task stop_grace_seconds"),
    )


def parse_desired_tasks(body: Any) -> DesiredTasks:
    """Validate the body of `GET /api/v1/agent/tasks/`."""
    if not isinstance(body, Mapping) or not isinstance(body.get("tasks"), list):
        raise ProtocolError("desired tasks response must be an object with a 'tasks' list")
    grace = body.get("stop_grace_seconds")
    if grace is None:
        grace = DEFAULT_STOP_GRACE_SECONDS
    node_id = body.get("node_id")
    return DesiredTasks(
        tasks=tuple(parse_desired_task(t) for t in body["tasks"]),
        stop_grace_seconds=_stop_grace(grace, "stop_grace_seconds"),
        node_id=node_id if isinstance(node_id, int) else None,
    )


def heartbeat_message(usage: Mapping[str, float], tasks: Mapping[TaskKey, int]) -> dict[str, Any]:
    return {
        "type": "heartbeat",
        "usage": dict(usage),
        "tasks": [{"id": k.id, "attempt": k.attempt, "pid": pid} for k, pid in tasks.items()],
    }


def task_status_message(
    key: TaskKey, state: str, exit_code: int | None = None, message: str = ""
) -> dict[str, Any]:
    return {
        "type": "task_status",
        "id": key.id,
        "attempt": key.attempt,
        "state": state,
        "exit_code": exit_code,
        "message": message,
    }


def metrics_message(key: TaskKey, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"type": "metrics", "id": key.id, "attempt": key.attempt, "points": list(points)}


def logs_message(key: TaskKey, stream: str, lines: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "logs",
        "id": key.id,
        "attempt": key.attempt,
        "stream": stream,
        "lines": list(lines),
    }


def api_url(server: str, path: str) -> str:
    return server.rstrip("/") + path


def websocket_url(server: str) -> str:
    """`http://host:port/prefix` → `ws://host:port/prefix/ws/agent/` (https → wss)."""
    base = server.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    else:
        raise ValueError(f"server URL must start with http:// or https://, got {server!r}")
    return base + WEBSOCKET_PATH
