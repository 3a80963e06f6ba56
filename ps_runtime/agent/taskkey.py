"""A task attempt as the agent socket's messages name it: `id` and `attempt`."""

from __future__ import annotations

from typing import Any, NamedTuple

from ps_runtime.agent.fields import JsonObject
from ps_runtime.agent.kinds import MessageKind


class TaskKey(NamedTuple):
    """A task attempt: a new attempt of the same id means "restart"."""

    id: int
    attempt: int


def task_key(fields: JsonObject) -> TaskKey:
    """The task attempt a message is about, from its `id` and `attempt`."""
    return TaskKey(fields.integer("id"), fields.integer("attempt", minimum=0))


def task_wire(kind: MessageKind, task: TaskKey) -> dict[str, Any]:
    """The start of a message about `task`: its type, id and attempt."""
    return {"type": kind.value, "id": task.id, "attempt": task.attempt}
