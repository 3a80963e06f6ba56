"""The messages of stall detection on the `/ws/agent/` socket (docs/protocol.md §1).

Up: `progress`, what a task's stall-detection lines said (`ps_runtime.reporting`: the
closures its coordinator completed, the phases it marked), batched like metrics; and
`stacks`, one task's Python stacks, taken because the server asked. Down:
`capture_stacks`, the job stalled: take the stacks of its tasks on this node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from ps_runtime.agent.fields import JsonObject, ProtocolError, as_log_line, as_str, join, refuse
from ps_runtime.agent.kinds import MessageKind
from ps_runtime.agent.taskkey import TaskKey, task_key, task_wire
from ps_runtime.reporting import PHASE_NAME

# A progress message holds at most this many items (a task writes one every 2 s or so).
MAX_PROGRESS_ITEMS = 1000
# What a stacks message carries at most; the task's log holds the whole dump.
MAX_STACKS_CHARS = 64 * 1024
# How the lines `ps_runtime.reporting` writes for the agent start (a metric line starts
# with `{"step"`): a cheap test before the JSON is read.
_LINE_STARTS = ('{"progress"', '{"phase"')


class PhaseState(StrEnum):
    BEGIN = "begin"
    END = "end"


class StackMethod(StrEnum):
    """How the agent took a task's stacks."""

    PY_SPY = "py-spy"  # `py-spy dump` from outside the process
    FAULTHANDLER = "faulthandler"  # the task wrote them to its stderr (`STACKS_SIGNAL`)
    NONE = "none"  # neither worked; the text says why (a process stopped by SIGSTOP)


def as_phase(value: object, path: str) -> str:
    name = as_str(value, path)
    if not PHASE_NAME.fullmatch(name):
        refuse(path, "a phase name (lower-case letters, digits, '_'; at most 32)", value)
    return name


@dataclass(frozen=True, slots=True)
class ProgressItem:
    """One line of a task's stall detection: its coordinator had completed `closures`
    closures by `time`, or it began or ended `phase` (an evaluation, a checkpoint)."""

    time: datetime
    closures: int | None = None
    phase: str | None = None
    state: PhaseState | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"time": self.time.isoformat()}
        if self.closures is not None:
            wire["closures"] = self.closures
        else:
            wire.update(phase=self.phase, state=None if self.state is None else self.state.value)
        return wire

    @classmethod
    def from_fields(cls, fields: JsonObject) -> ProgressItem:
        when = fields.time("time")
        if "closures" in fields.data:
            return cls(when, closures=fields.integer("closures", minimum=0))
        return cls(
            when,
            phase=as_phase(fields.required("phase"), fields.at("phase")),
            state=fields.choice("state", PhaseState),
        )


def read_progress_line(line: str) -> ProgressItem | None:
    """A stall-detection line of a task's metrics file as an item; None for any other
    line (a metric point, or a line `ps_runtime.reporting` did not write)."""
    if not line.startswith(_LINE_STARTS):
        return None
    try:
        obj = json.loads(line)
        progress = obj.get("progress")
        if isinstance(progress, dict):
            obj = {"time": obj.get("time"), "closures": progress.get("closures")}
        return ProgressItem.from_fields(JsonObject(obj))
    except (ValueError, AttributeError):  # not JSON, or a ProtocolError
        return None


@dataclass(frozen=True, slots=True)
class Progress:
    """A batch of a task attempt's progress items (at most every 0.5 s)."""

    KIND: ClassVar[MessageKind] = MessageKind.PROGRESS
    task: TaskKey
    items: tuple[ProgressItem, ...]

    def to_wire(self) -> dict[str, Any]:
        return {**task_wire(self.KIND, self.task), "items": [i.to_wire() for i in self.items]}

    @classmethod
    def from_fields(cls, fields: JsonObject) -> Progress:
        items = fields.items("items", required=True)
        if len(items) > MAX_PROGRESS_ITEMS:
            raise ProtocolError(
                f"{fields.at('items')} must hold at most {MAX_PROGRESS_ITEMS} items, "
                f"got {len(items)}",
                fields.at("items"),
            )
        where = fields.at("items")
        return cls(
            task=task_key(fields),
            items=tuple(
                ProgressItem.from_fields(JsonObject(item, join(where, i)))
                for i, item in enumerate(items)
            ),
        )


@dataclass(frozen=True, slots=True)
class Stacks:
    """A task attempt's Python stacks, taken after `capture_stacks` (at most
    `MAX_STACKS_CHARS`; the task's log has them whole), or why there are none."""

    KIND: ClassVar[MessageKind] = MessageKind.STACKS
    task: TaskKey
    method: StackMethod
    text: str

    def to_wire(self) -> dict[str, Any]:
        return {**task_wire(self.KIND, self.task), "method": self.method.value, "text": self.text}

    @classmethod
    def from_fields(cls, fields: JsonObject) -> Stacks:
        text = as_log_line(fields.required("text"), fields.at("text"))  # NUL: U+FFFD
        if len(text) > MAX_STACKS_CHARS:
            refuse(fields.at("text"), f"text of at most {MAX_STACKS_CHARS} characters", text)
        return cls(task_key(fields), fields.choice("method", StackMethod), text)


@dataclass(frozen=True, slots=True)
class CaptureStacks:
    """Server → agent: job `job_id` stalled; take the stacks of its tasks on this node."""

    KIND: ClassVar[MessageKind] = MessageKind.CAPTURE_STACKS
    job_id: int

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.KIND.value, "job_id": self.job_id}

    @classmethod
    def from_fields(cls, fields: JsonObject) -> CaptureStacks:
        return cls(job_id=fields.integer("job_id", minimum=1))
