"""Domain events: how lower layers tell upper ones what happened, without importing them.

A service in a lower app (`jobs`, `nodes`, `tenancy`, `telemetry`) calls `publish(event)`
inside its transaction; once that transaction commits, every handler named in
`settings.EVENT_HANDLERS` (dotted paths, imported on first use) gets the event. Upper
layers decide what an event means for them: the scheduler queues a cycle, the browser
feed pushes a message to the job's page, the agent gateway tells a node to reconcile.

Events are plain frozen data (no model instances), so a handler can run anywhere and a
test can assert on exactly what was published. A handler that raises is logged and does
not stop the others: the state change has committed already.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job_id: int
    team_id: int


@dataclass(frozen=True, slots=True)
class JobStateChanged:
    """The job moved to `state` (a `JobState` value); `pending_reason` while pending."""

    job_id: int
    state: str
    message: str = ""
    pending_reason: str = ""


@dataclass(frozen=True, slots=True)
class JobStalled:
    """No task of the running job reported progress for longer than its stall limit
    (`jobs.stalls`); `reason` says for how long and what the platform does next."""

    job_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class StacksWanted:
    """The job stalled: the agents of `node_ids` should take the Python stacks of its
    tasks there (`capture_stacks`, docs/protocol.md §1)."""

    job_id: int
    node_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RestartsWaiting:
    """Restarted tasks of the job wait out their backoff (`jobs.services.restarts`): in
    `delay_s` seconds their agents should be told to start them."""

    job_id: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class JobPendingReasonChanged:
    """Why a pending job is still waiting changed (the scheduler's cycle says so); the job's
    state did not change, so this is no reason to run another cycle."""

    job_id: int
    pending_reason: str


@dataclass(frozen=True, slots=True)
class JobEventRecorded:
    """A line of the job's event history (`JobEvent`)."""

    job_id: int
    time: str  # ISO 8601
    kind: str
    reason: str
    actor: str
    from_state: str = ""
    to_state: str = ""


@dataclass(frozen=True, slots=True)
class JobScaled:
    job_id: int
    workers: int


@dataclass(frozen=True, slots=True)
class TaskStateChanged:
    job_id: int
    task_id: int
    role: str
    index: int
    state: str  # a `TaskState` value
    ended: bool  # the task is over: its node has room again
    message: str = ""  # how far a `preparing` task's environment build is


@dataclass(frozen=True, slots=True)
class NodeTasksChanged:
    """The desired tasks of these nodes changed: their agents should reconcile."""

    node_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NodeChanged:
    """A node joined, was lost, cordoned, drained or given a new owner."""

    node_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class AccessChanged:
    """What the user may see may have shrunk: removed from a team, their platform role or
    password changed, deactivated. Open live feeds check their access again."""

    user_id: int


@dataclass(frozen=True, slots=True)
class QuotaChanged:
    team_id: int


@dataclass(frozen=True, slots=True)
class MetricPointsIngested:
    job_id: int
    points: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class LogLinesIngested:
    job_id: int
    lines: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


Event = (
    JobSubmitted
    | JobStateChanged
    | JobPendingReasonChanged
    | JobStalled
    | StacksWanted
    | RestartsWaiting
    | JobEventRecorded
    | JobScaled
    | TaskStateChanged
    | NodeTasksChanged
    | NodeChanged
    | AccessChanged
    | QuotaChanged
    | MetricPointsIngested
    | LogLinesIngested
)
Handler = Callable[[Event], None]

# The handlers imported, keyed by the setting they came from: a test that overrides
# EVENT_HANDLERS gets its own handlers without resetting anything.
_handlers: tuple[tuple[str, ...], list[Handler]] = ((), [])


def _load_handlers() -> list[Handler]:
    global _handlers
    paths = tuple(settings.EVENT_HANDLERS)
    if paths != _handlers[0]:
        _handlers = (paths, [import_string(path) for path in paths])
    return _handlers[1]


def deliver(event: Event) -> None:
    """Hand `event` to every handler now (`publish` calls this after the commit)."""
    for handler in _load_handlers():
        try:
            handler(event)
        except Exception:
            logger.exception("event handler %s failed on %r", handler, type(event).__name__)


def publish(event: Event) -> None:
    """Deliver `event` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: deliver(event))
