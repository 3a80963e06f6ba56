"""The `type` of every message on the agent socket (docs/protocol.md §1)."""

from __future__ import annotations

from enum import StrEnum


class MessageKind(StrEnum):
    """The `type` of a message: the first six go up (agent → server), the rest down."""

    HEARTBEAT = "heartbeat"
    TASK_STATUS = "task_status"
    METRICS = "metrics"
    LOGS = "logs"
    PROGRESS = "progress"
    STACKS = "stacks"
    TASKS_CHANGED = "tasks_changed"
    ERROR = "error"
    ACK = "ack"
    CAPTURE_STACKS = "capture_stacks"
