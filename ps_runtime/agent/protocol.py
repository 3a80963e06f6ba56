"""The agent ⇄ control-plane protocol (docs/protocol.md §1), defined once for both sides.

Paths, the WebSocket close code, the desired-tasks document (`DesiredTasks`, built by
`trainhub.jobs.selectors` and parsed by the agent) and, re-exported from `messages`,
`downward`, `stallmessages`, `taskkey` and `kinds`, the socket's message types. Everything
here is plain data with strict parsers (see `fields`); this module imports neither Django
nor anything of the control plane.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ps_runtime.agent.downward import Ack, ErrorMessage, TasksChanged
from ps_runtime.agent.envspec import JobEnvironment
from ps_runtime.agent.fields import JsonObject, ProtocolError, as_int, as_str, join
from ps_runtime.agent.kinds import MessageKind
from ps_runtime.agent.messages import (
    AgentMessage,
    DownwardMessage,
    Heartbeat,
    IsolationMode,
    LiveTask,
    Logs,
    LogStream,
    ReportedState,
    TaskStatus,
    UpwardMessage,
    parse_agent_message,
    parse_from_agent,
    parse_from_server,
)
from ps_runtime.agent.metricmessages import (
    MAX_BATCH_ITEMS,
    MAX_BATCH_VALUES,
    MAX_STEP,
    MetricPoint,
    Metrics,
    SeriesColumns,
)
from ps_runtime.agent.stallmessages import (
    CaptureStacks,
    PhaseState,
    Progress,
    ProgressItem,
    StackMethod,
    Stacks,
)
from ps_runtime.agent.taskkey import TaskKey
from ps_runtime.taskenv import Role

__all__ = [
    "CLOSE_UNAUTHORIZED",
    "CREDENTIAL_PATH",
    "DEFAULT_STOP_GRACE_SECONDS",
    "DESIRED_TASKS_PATH",
    "ENROLL_PATH",
    "MAX_BATCH_ITEMS",
    "MAX_BATCH_VALUES",
    "MAX_STEP",
    "WEBSOCKET_PATH",
    "Ack",
    "AgentMessage",
    "CaptureStacks",
    "DesiredTask",
    "DesiredTasks",
    "DownwardMessage",
    "Enrolled",
    "ErrorMessage",
    "Heartbeat",
    "IsolationMode",
    "JobEnvironment",
    "LiveTask",
    "LogStream",
    "Logs",
    "MessageKind",
    "MetricPoint",
    "Metrics",
    "PhaseState",
    "Progress",
    "ProgressItem",
    "ProtocolError",
    "RenewedCredential",
    "ReportedState",
    "SeriesColumns",
    "StackMethod",
    "Stacks",
    "TaskKey",
    "TaskStatus",
    "TaskTLS",
    "TasksChanged",
    "UpwardMessage",
    "api_url",
    "parse_agent_message",
    "parse_desired_task",
    "parse_desired_tasks",
    "parse_enrolled",
    "parse_from_agent",
    "parse_from_server",
    "parse_renewed_credential",
    "websocket_url",
]

ENROLL_PATH = "/api/v1/nodes/enroll/"
DESIRED_TASKS_PATH = "/api/v1/agent/tasks/"
CREDENTIAL_PATH = "/api/v1/agent/credential/"
WEBSOCKET_PATH = "/ws/agent/"

DEFAULT_STOP_GRACE_SECONDS = 5.0
# Close code the server uses on the agent socket for a bad (unknown, expired or revoked)
# credential, also when an admin revokes the credential of a connected node.
CLOSE_UNAUTHORIZED = 4401


PEM_MARKER = "-----BEGIN "


@dataclass(frozen=True, slots=True)
class TaskTLS:
    """A task's material for TLS on the runtime's gRPC, issued by the control plane: the
    certificate and key of the node the task runs on (its address is the certificate's
    subject alternative name) and the job's own CA, all PEM. The agent writes them into
    the task directory and points `TRAINHUB_TLS_CERT/KEY/CA` at them."""

    cert: str
    key: str
    ca: str

    def __repr__(self) -> str:  # never print the private key by accident
        return "TaskTLS(cert=<pem>, key=***, ca=<pem>)"

    def to_wire(self) -> dict[str, str]:
        return {"cert": self.cert, "key": self.key, "ca": self.ca}

    @classmethod
    def from_fields(cls, fields: JsonObject) -> TaskTLS:
        def pem(name: str) -> str:
            text = fields.text(name, non_empty=True)
            if PEM_MARKER not in text:  # the message never quotes the text: it may be a key
                raise ProtocolError(f"{fields.at(name)} must be PEM text", fields.at(name))
            return text

        return cls(cert=pem("cert"), key=pem("key"), ca=pem("ca"))


@dataclass(frozen=True, slots=True)
class DesiredTask:
    """One entry of `GET /api/v1/agent/tasks/`: a task attempt that should be running."""

    id: int
    attempt: int
    job_id: int
    role: Role
    index: int
    cpu: float = 0.0
    memory_mb: int = 0
    gpu_indices: tuple[int, ...] = ()
    # Added to the task process's environment (built with `ps_runtime.taskenv`).
    env: Mapping[str, str] = field(default_factory=dict)
    # SIGTERM-to-SIGKILL time when this task stops; None: the response-level value.
    stop_grace_seconds: float | None = None
    # TLS material for the job's gRPC; None: plaintext (loopback, or the operator opted out).
    tls: TaskTLS | None = None
    # The job's own Python environment (built by the agent with uv); None: the runtime's.
    environment: JobEnvironment | None = None

    @property
    def key(self) -> TaskKey:
        return TaskKey(self.id, self.attempt)

    def to_wire(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id,
            "job_id": self.job_id,
            "role": self.role.value,
            "index": self.index,
            "attempt": self.attempt,
            "resources": {
                "cpu": self.cpu,
                "memory_mb": self.memory_mb,
                "gpu_indices": list(self.gpu_indices),
            },
            "env": dict(self.env),
        }
        if self.stop_grace_seconds is not None:
            document["stop_grace_seconds"] = self.stop_grace_seconds
        if self.tls is not None:
            document["tls"] = self.tls.to_wire()
        if self.environment is not None:
            document["environment"] = self.environment.to_wire()
        return document

    @classmethod
    def from_fields(cls, fields: JsonObject) -> DesiredTask:
        resources = fields.obj("resources")
        gpus = resources.at("gpu_indices")
        env = fields.obj("env")
        tls = fields.data.get("tls")
        environment = fields.data.get("environment")
        return cls(
            id=fields.integer("id"),
            attempt=fields.integer("attempt", minimum=0),
            job_id=fields.integer("job_id"),
            role=fields.choice("role", Role),
            index=fields.integer("index", minimum=0),
            cpu=resources.optional_number("cpu", minimum=0) or 0.0,
            memory_mb=resources.optional_integer("memory_mb", minimum=0) or 0,
            gpu_indices=tuple(
                as_int(i, join(gpus, n), minimum=0)
                for n, i in enumerate(resources.items("gpu_indices"))
            ),
            env={name: as_str(value, env.at(name)) for name, value in env.data.items()},
            stop_grace_seconds=fields.optional_number("stop_grace_seconds", minimum=0),
            tls=None if tls is None else TaskTLS.from_fields(fields.obj("tls")),
            environment=(
                None
                if environment is None
                else JobEnvironment.from_fields(fields.obj("environment"))
            ),
        )


@dataclass(frozen=True, slots=True)
class DesiredTasks:
    """The complete set of tasks that should run on one node now."""

    tasks: tuple[DesiredTask, ...]
    stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS
    node_id: int | None = None
    # Jobs that ended (cancelled, failed, succeeded) while tasks of theirs may still run
    # here: those stop with `stop_grace_seconds`, never a coordinator's own longer grace.
    ended_jobs: frozenset[int] = frozenset()

    def to_wire(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "stop_grace_seconds": self.stop_grace_seconds,
            "ended_jobs": sorted(self.ended_jobs),
            "tasks": [task.to_wire() for task in self.tasks],
        }


def parse_desired_task(obj: object, path: str = "task") -> DesiredTask:
    """Validate one task object of the desired-tasks document."""
    return DesiredTask.from_fields(JsonObject(obj, path))


def parse_desired_tasks(body: object) -> DesiredTasks:
    """Validate the body of `GET /api/v1/agent/tasks/`.

    Raises:
        ProtocolError: naming the first field that does not match docs/protocol.md.
    """
    fields = JsonObject(body, root="the desired tasks document")
    grace = fields.optional_number("stop_grace_seconds", minimum=0)
    return DesiredTasks(
        tasks=tuple(
            parse_desired_task(task, join("tasks", i))
            for i, task in enumerate(fields.items("tasks", required=True))
        ),
        stop_grace_seconds=DEFAULT_STOP_GRACE_SECONDS if grace is None else grace,
        node_id=fields.optional_integer("node_id"),
        ended_jobs=frozenset(
            as_int(job, join(fields.at("ended_jobs"), i))
            for i, job in enumerate(fields.items("ended_jobs"))
        ),
    )


@dataclass(frozen=True, slots=True)
class Enrolled:
    """The answer to `POST /api/v1/nodes/enroll/`: the node's id and credential (once),
    and when the credential expires."""

    node_id: int
    credential: str
    credential_expires_at: datetime

    def __repr__(self) -> str:  # never print the credential by accident
        return f"Enrolled(node_id={self.node_id!r}, credential=***)"

    def to_wire(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "credential": self.credential,
            "credential_expires_at": self.credential_expires_at.isoformat(),
        }


def parse_enrolled(body: object) -> Enrolled:
    """Validate the enrollment answer; `ProtocolError` names the field."""
    fields = JsonObject(body, root="the enrollment answer")
    return Enrolled(
        node_id=fields.integer("node_id"),
        credential=fields.text("credential", non_empty=True),
        credential_expires_at=fields.time("credential_expires_at"),
    )


@dataclass(frozen=True)
class RenewedCredential:
    """The answer to `POST /api/v1/agent/credential/`: the node's new credential (once)
    and when it expires; the one it replaces stays valid for a short overlap."""

    credential: str
    credential_expires_at: datetime

    def __repr__(self) -> str:  # never print the credential by accident
        return f"RenewedCredential(credential=***, expires_at={self.credential_expires_at})"

    def to_wire(self) -> dict[str, Any]:
        return {
            "credential": self.credential,
            "credential_expires_at": self.credential_expires_at.isoformat(),
        }


def parse_renewed_credential(body: object) -> RenewedCredential:
    """Validate the renewal answer; `ProtocolError` names the field."""
    fields = JsonObject(body, root="the credential renewal answer")
    return RenewedCredential(
        credential=fields.text("credential", non_empty=True),
        credential_expires_at=fields.time("credential_expires_at"),
    )


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
