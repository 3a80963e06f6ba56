"""The `type` of every message on the agent socket (docs/protocol.md §1)."""

from __future__ import annotations

from enum import StrEnum


class MessageKind(StrEnum):
    """The `type` of a message: the first four go up (agent → server), the rest down."""

    HEARTBEAT = "heartbeat"
    TASK_STATUS = "task_status"
    METRICS = "metrics"
    LOGS = "logs"
    TASKS_CHANGED = "tasks_changed"
    ERROR = "error"
    ACK = "ack"
