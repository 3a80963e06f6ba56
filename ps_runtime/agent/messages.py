"""Messages on the `/ws/agent/` socket (docs/protocol.md §1), as types both sides use.

The agent builds these and sends `to_wire()`; the control plane's agent gateway turns
what it receives into one with `parse_from_agent` and calls its services with the typed
fields. The server's notices come down the same way (`parse_from_server`). Parsing is
strict (see `fields`): a wrong type, a bool where an integer belongs, NaN or infinity,
an unknown state or kind is a `ProtocolError` that names the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from ps_runtime.agent.downward import Ack, ErrorMessage, TasksChanged
from ps_runtime.agent.fields import (
    JsonObject,
    ProtocolError,
    as_int,
    as_log_line,
    as_number,
    as_str,
    join,
    refuse,
)
from ps_runtime.agent.gpus import GpuUsage
from ps_runtime.agent.kinds import MessageKind
from ps_runtime.agent.metricmessages import Metrics, batch_items
from ps_runtime.agent.stallmessages import CaptureStacks, Progress, Stacks
from ps_runtime.agent.taskkey import TaskKey, task_key, task_wire
from ps_runtime.version import check_version


class IsolationMode(StrEnum):
    """How the agent keeps tasks apart (`ps_runtime.agent.isolation`)."""

    # Tasks run unsandboxed as the agent's user (TRAINHUB_TASK_ISOLATION=none, a
    # developer's opt-out): one team per node at a time.
    NONE = "none"
    UID = "uid"  # agents before the sandbox: a uid per job, RLIMIT_AS only
    UID_CGROUP = "uid+cgroup"  # agents before the sandbox: a uid per job, a cgroup per task
    # bubblewrap under a root agent: a leased uid per job, a cgroup per task.
    SANDBOX = "sandbox"
    # bubblewrap under an unprivileged agent: every task in its own namespaces, but all
    # as the agent's uid (one team per node at a time).
    SANDBOX_USER = "sandbox-user"
    # The agent cannot sandbox (its log and the node page say why): it starts no task.
    UNAVAILABLE = "unavailable"


class ReportedState(StrEnum):
    """What an agent says about a task attempt's process."""

    # The agent is building the job's Python environment before it starts the process;
    # the status's message says how far (repeated as the build goes on).
    PREPARING = "preparing"
    RUNNING = "running"  # the process has started
    SUCCEEDED = "succeeded"  # it exited by itself with code 0
    FAILED = "failed"  # it exited by itself with another code, or could not start
    STOPPED = "stopped"  # the agent stopped it because it was no longer desired


class LogStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


MAX_PORT = 65535
# A heartbeat's usage: a few named numbers ("cpu_percent", "memory_used_mb").
MAX_USAGE_FIELDS = 32
_USAGE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
# The node's totals in a heartbeat's usage, measured as at enrollment (`facts.node_totals`):
# the CPUs the agent may use and the node's memory in MiB. The server caps what it
# schedules on the node to them (`trainhub.nodes.capacity`); older agents leave them out.
USAGE_CPUS = "cpus"
USAGE_MEMORY_TOTAL_MB = "memory_total_mb"


def as_port(value: object, path: str) -> int:
    """A TCP port number, 1 to 65535."""
    port = as_int(value, path, minimum=1)
    if port > MAX_PORT:
        raise ProtocolError(f"{path} must be a port number <= {MAX_PORT}, got {port}")
    return port


def as_version(value: object, path: str) -> str:
    """A runtime version string, as `ps_runtime.version.check_version` allows."""
    text = as_str(value, path)
    try:
        return check_version(text)
    except ValueError as exc:
        raise ProtocolError(f"{path} {exc}") from None


@dataclass(frozen=True, slots=True)
class LiveTask:
    """A task process the agent is running, as its heartbeat lists it."""

    task: TaskKey
    pid: int


def _usage(usage: JsonObject) -> dict[str, float]:
    """A heartbeat's usage: at most `MAX_USAGE_FIELDS` numbers with snake_case names."""
    if len(usage.data) > MAX_USAGE_FIELDS:
        raise ProtocolError(
            f"{usage.path} must have at most {MAX_USAGE_FIELDS} fields, got {len(usage.data)}",
            usage.path,
        )
    out = {}
    for name, value in usage.data.items():
        if not _USAGE_NAME.fullmatch(name):
            raise ProtocolError(
                f"{usage.path} field names must be snake_case words of at most 64 "
                f"characters, got {name[:80]!r}",
                usage.path,
            )
        out[name] = _usage_value(name, value, usage.at(name))
    return out


def _usage_value(name: str, value: object, path: str) -> float:
    """A usage number; the node's totals are positive (memory in whole MiB)."""
    if name == USAGE_MEMORY_TOTAL_MB:
        return as_int(value, path, minimum=1)
    number = as_number(value, path)
    if name == USAGE_CPUS and not number > 0:
        refuse(path, "a finite number > 0", value)
    return number


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Node usage and totals, each GPU's load, the TCP ports listened on, live task
    processes, how tasks are isolated and the agent's version; every 5 s and on connect."""

    KIND: ClassVar[MessageKind] = MessageKind.HEARTBEAT
    usage: Mapping[str, float] = field(default_factory=dict)
    tasks: tuple[LiveTask, ...] = ()
    gpus: tuple[GpuUsage, ...] = ()
    ports_in_use: tuple[int, ...] = ()
    # Left out by agents older than the field; the server then keeps what it knew.
    isolation: IsolationMode | None = None
    # The trainhub-runtime version the agent runs; left out by agents older than the field
    # (and by a copy without one): the server then keeps what it knew.
    agent_version: str | None = None

    def to_wire(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "type": self.KIND.value,
            "usage": dict(self.usage),
            "gpus": [dict(g) for g in self.gpus],
            "ports_in_use": list(self.ports_in_use),
            "tasks": [
                {"id": t.task.id, "attempt": t.task.attempt, "pid": t.pid} for t in self.tasks
            ],
        }
        if self.isolation is not None:
            document["isolation"] = self.isolation.value
        if self.agent_version is not None:
            document["agent_version"] = self.agent_version
        return document

    @property
    def cpus(self) -> float | None:
        """The CPUs the agent may use, as it measured them; None from older agents."""
        return self.usage.get(USAGE_CPUS)

    @property
    def memory_total_mb(self) -> int | None:
        """The node's memory (MiB), as the agent measured it; None from older agents."""
        value = self.usage.get(USAGE_MEMORY_TOTAL_MB)
        return None if value is None else int(value)

    @classmethod
    def from_fields(cls, fields: JsonObject) -> Heartbeat:
        usage = fields.obj("usage")
        live = []
        for i, item in enumerate(fields.items("tasks")):
            entry = JsonObject(item, join(fields.at("tasks"), i))
            live.append(LiveTask(task_key(entry), entry.integer("pid", minimum=1)))
        gpus = []
        for i, item in enumerate(fields.items("gpus")):
            entry = JsonObject(item, join(fields.at("gpus"), i))
            gpus.append(
                GpuUsage(
                    index=entry.integer("index", minimum=0),
                    utilization_percent=float(entry.number("utilization_percent", minimum=0)),
                    memory_used_mb=entry.integer("memory_used_mb", minimum=0),
                )
            )
        ports = fields.at("ports_in_use")
        isolation = (
            fields.choice("isolation", IsolationMode) if "isolation" in fields.data else None
        )
        version = (
            as_version(fields.data["agent_version"], fields.at("agent_version"))
            if "agent_version" in fields.data
            else None
        )
        return cls(
            usage=_usage(usage),
            tasks=tuple(live),
            gpus=tuple(gpus),
            ports_in_use=tuple(
                as_port(p, join(ports, i)) for i, p in enumerate(fields.items("ports_in_use"))
            ),
            isolation=isolation,
            agent_version=version,
        )


@dataclass(frozen=True, slots=True)
class TaskStatus:
    """A task attempt started, ended by itself, or was stopped; `oom_killed`: the OOM
    killer killed a process of its cgroup (the server's cause `out_of_memory`)."""

    KIND: ClassVar[MessageKind] = MessageKind.TASK_STATUS
    task: TaskKey
    state: ReportedState
    exit_code: int | None = None
    message: str = ""
    oom_killed: bool = False

    def to_wire(self) -> dict[str, Any]:
        wire = {
            **task_wire(self.KIND, self.task),
            "state": self.state.value,
            "exit_code": self.exit_code,
            "message": self.message,
        }
        if self.oom_killed:  # only then: a server before the field reads the rest as ever
            wire["oom_killed"] = True
        return wire

    @classmethod
    def from_fields(cls, fields: JsonObject) -> TaskStatus:
        return cls(
            task=task_key(fields),
            state=fields.choice("state", ReportedState),
            exit_code=fields.optional_integer("exit_code"),
            message=fields.optional_text("message") or "",
            oom_killed=fields.optional_flag("oom_killed"),
        )


@dataclass(frozen=True, slots=True)
class Logs:
    """A batch of a task attempt's output lines on one stream (at most every 0.5 s)."""

    KIND: ClassVar[MessageKind] = MessageKind.LOGS
    task: TaskKey
    stream: LogStream
    lines: tuple[str, ...]

    def to_wire(self) -> dict[str, Any]:
        return {
            **task_wire(self.KIND, self.task),
            "stream": self.stream.value,
            "lines": list(self.lines),
        }

    @classmethod
    def from_fields(cls, fields: JsonObject) -> Logs:
        where = fields.at("lines")
        lines = batch_items(fields, "lines")
        return cls(
            task=task_key(fields),
            stream=fields.choice("stream", LogStream),
            lines=tuple(as_log_line(line, join(where, i)) for i, line in enumerate(lines)),
        )


UpwardMessage = Heartbeat | TaskStatus | Metrics | Logs | Progress | Stacks
DownwardMessage = TasksChanged | ErrorMessage | Ack | CaptureStacks
AgentMessage = UpwardMessage | DownwardMessage

_PARSERS: dict[MessageKind, Callable[[JsonObject], AgentMessage]] = {
    MessageKind.HEARTBEAT: Heartbeat.from_fields,
    MessageKind.TASK_STATUS: TaskStatus.from_fields,
    MessageKind.METRICS: Metrics.from_fields,
    MessageKind.LOGS: Logs.from_fields,
    MessageKind.PROGRESS: Progress.from_fields,
    MessageKind.STACKS: Stacks.from_fields,
    MessageKind.TASKS_CHANGED: TasksChanged.from_fields,
    MessageKind.ERROR: ErrorMessage.from_fields,
    MessageKind.ACK: Ack.from_fields,
    MessageKind.CAPTURE_STACKS: CaptureStacks.from_fields,
}


def parse_agent_message(obj: object) -> AgentMessage:
    """Any message of the agent socket, in either direction, from its decoded JSON.

    Raises:
        ProtocolError: naming the first field that does not match docs/protocol.md.
    """
    fields = JsonObject(obj)
    return _PARSERS[fields.choice("type", MessageKind)](fields)


def parse_from_agent(obj: object) -> UpwardMessage:
    """A message the server received; a server-only kind is refused."""
    message = parse_agent_message(obj)
    if isinstance(message, DownwardMessage):
        raise ProtocolError(f"type {message.KIND.value!r} is sent by the server, not by an agent")
    return message


def parse_from_server(obj: object) -> DownwardMessage:
    """A message the agent received; an agent-only kind is refused."""
    message = parse_agent_message(obj)
    if not isinstance(message, DownwardMessage):
        raise ProtocolError(f"type {message.KIND.value!r} is sent by an agent, not by the server")
    return message
