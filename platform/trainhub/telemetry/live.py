"""The browser's live feed: domain events turned into messages for a job's watchers.

Lower layers publish plain events (`trainhub.events`); this handler decides what a
browser watching the job sees. Each event becomes channel-layer messages to the job's
group, and `JobStreamConsumer` (consumers.py) forwards them with the browser-facing `type`
that `frontend/src/pages/job.js` reads: `state`, `event`, `task`, `metrics`, `logs` or
`result`.

A `state` message carries the job's fields as stored when it is sent (`job_fields`), not
only what the event said: every change of them (a state, a pending reason, a restart, a
scale) comes with an event here, and the newest row is right whatever order handlers of
concurrent commits run in. A browser gets the same when it (re)connects (`current`).
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
from trainhub.jobs.choices import JOB_TERMINAL, JobState
from trainhub.jobs.models import Job

from .results import coordinator_result, result_in_lines, result_rows

# The job's fields a `state` message carries (docs/design.md, "Web pages").
_JOB_FIELDS = (
    "state",
    "message",
    "pending_reason",
    "started_at",
    "finished_at",
    "restarts",
    "infra_restarts",
    "preemptions",
    "target_workers",
)


def job_group(job_id: int) -> str:
    """The channel-layer group of the browsers watching job `job_id`."""
    return f"job-{job_id}"


def user_group(user_id: int) -> str:
    """The group of every live feed user `user_id` has open: told when their access changes."""
    return f"user-{user_id}"


def job_fields(job_id: int) -> dict[str, Any] | None:
    """The job as stored now, as a `job.state` message; None if there is no such job.
    Plain values only: the Redis layer serializes messages with msgpack."""
    row = Job.objects.filter(pk=job_id).values(*_JOB_FIELDS).first()
    if row is None:
        return None
    workers = row.pop("target_workers")
    message: dict[str, Any] = {"type": "job.state", **row}
    if row["state"] != JobState.PENDING:  # an old reason the row still holds
        message["pending_reason"] = ""
    for name in ("started_at", "finished_at"):
        message[name] = row[name].isoformat() if row[name] else None
    if workers is not None:  # else the spec's minimum, which the page already shows
        message["workers"] = workers
    return message


def _result(rows: list[tuple[str, str]]) -> dict[str, Any]:
    return {"type": "job.result", "rows": [[name, value] for name, value in rows]}


def current(job_id: int) -> list[dict[str, Any]]:
    """What a browser that (re)connects to the job's feed is sent first: its fields, and an
    ended job's result (the live parts of the page missed while away)."""
    fields = job_fields(job_id)
    if fields is None:
        return []
    messages = [fields]
    if fields["state"] in JOB_TERMINAL:
        rows = result_rows(coordinator_result(job_id))
        if rows:
            messages.append(_result(rows))
    return messages


def _state(event: JobStateChanged) -> dict[str, Any]:
    fields = job_fields(event.job_id)
    if fields is not None:
        return fields
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


def feed_messages(event: Event) -> tuple[int, list[dict[str, Any]]] | None:
    """The job whose watchers hear of `event`, and the messages they get; None if none do."""
    if isinstance(event, JobStateChanged):
        return event.job_id, [_state(event)]
    if isinstance(event, JobPendingReasonChanged):
        fields = job_fields(event.job_id)
        return None if fields is None else (event.job_id, [fields])
    if isinstance(event, JobEventRecorded):
        messages = [_job_event(event)]
        # A state change sends its own `state`; a restart, scale or preemption changes
        # the job's counters without one.
        fields = job_fields(event.job_id) if event.kind != "state" else None
        return event.job_id, messages if fields is None else [*messages, fields]
    if isinstance(event, TaskStateChanged):
        return event.job_id, [_task(event)]
    # Plain lists and dicts: the Redis layer serializes messages with msgpack.
    if isinstance(event, MetricPointsIngested) and event.points:
        return event.job_id, [{"type": "metrics.points", "points": [dict(p) for p in event.points]}]
    if isinstance(event, LogLinesIngested) and event.lines:
        messages = [{"type": "log.lines", "lines": [dict(line) for line in event.lines]}]
        rows = result_rows(result_in_lines(event.lines))
        return event.job_id, [*messages, _result(rows)] if rows else messages
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
    routed = feed_messages(event)
    if routed is None:
        return
    job_id, messages = routed
    for message in messages:
        async_to_sync(layer.group_send)(job_group(job_id), message)
