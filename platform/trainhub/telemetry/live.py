"""The browser's live feed: domain events turned into messages for a job's watchers.

Lower layers publish plain events (`trainhub.events`); this handler decides what a
browser watching the job sees. Each event becomes one channel-layer message to the job's
group, and `JobStreamConsumer` (consumers.py) forwards it with the browser-facing `type`
that `frontend/src/job.js` reads: `state`, `event`, `task`, `metrics` or `logs`.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from trainhub.events import (
    AccessChanged,
    Event,
    JobEventRecorded,
    JobPendingReasonChanged,
    JobStateChanged,
    LogLinesIngested,
    MetricPointsIngested,
    TaskStateChanged,
)
from trainhub.jobs.choices import JobState


def job_group(job_id: int) -> str:
    """The channel-layer group of the browsers watching job `job_id`."""
    return f"job-{job_id}"


def user_group(user_id: int) -> str:
    """The group of every live feed user `user_id` has open: told when their access changes."""
    return f"user-{user_id}"


def _state(event: JobStateChanged) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "job.state", "state": event.state, "message": event.message}
    if event.pending_reason:
        message["pending_reason"] = event.pending_reason
    return message


def _job_event(event: JobEventRecorded) -> dict[str, Any]:
    return {
        "type": "job.event",
        "time": event.time,
        "kind": event.kind,
        "from_state": event.from_state,
        "to_state": event.to_state,
        "reason": event.reason,
        "actor": event.actor,
    }


def _task(event: TaskStateChanged) -> dict[str, Any]:
    return {
        "type": "task.state",
        "task": event.task_id,
        "role": event.role,
        "index": event.index,
        "state": event.state,
        "message": event.message,
    }


def feed_message(event: Event) -> tuple[int, dict[str, Any]] | None:
    """The job whose watchers hear of `event`, and the message they get; None if none do."""
    if isinstance(event, JobStateChanged):
        return event.job_id, _state(event)
    if isinstance(event, JobPendingReasonChanged):
        message = {
            "type": "job.state",
            "state": JobState.PENDING,
            "pending_reason": event.pending_reason,
        }
        return event.job_id, message
    if isinstance(event, JobEventRecorded):
        return event.job_id, _job_event(event)
    if isinstance(event, TaskStateChanged):
        return event.job_id, _task(event)
    # Plain lists and dicts: the Redis layer serializes messages with msgpack.
    if isinstance(event, MetricPointsIngested) and event.points:
        return event.job_id, {"type": "metrics.points", "points": [dict(p) for p in event.points]}
    if isinstance(event, LogLinesIngested) and event.lines:
        return event.job_id, {"type": "log.lines", "lines": [dict(line) for line in event.lines]}
    return None


def on_event(event: Event) -> None:
    """Push `event` to the browsers watching its job (an `EVENT_HANDLERS` entry); when a
    user's access changed, their open feeds check it again (`JobStreamConsumer`)."""
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(event, AccessChanged):
        async_to_sync(layer.group_send)(user_group(event.user_id), {"type": "access.changed"})
        return
    routed = feed_message(event)
    if routed is None:
        return
    job_id, message = routed
    async_to_sync(layer.group_send)(job_group(job_id), message)
