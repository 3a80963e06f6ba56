"""Translating agent messages into calls on the nodes, jobs and telemetry services.

A message is parsed once, strictly, by the protocol module the agent itself uses
(`ps_runtime.agent.protocol`); from there on only typed values travel. What browsers
see of metrics and logs is telemetry's business: its ingest functions publish the
events that the live feed turns into pushes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, assert_never

import numpy as np
from django.db import transaction

from ps_runtime.agent.delivery import Refusal
from ps_runtime.agent.protocol import (
    Heartbeat,
    Logs,
    Metrics,
    Progress,
    ProgressItem,
    ProtocolError,
    SeriesColumns,
    Stacks,
    TaskKey,
    TaskStatus,
    parse_from_agent,
)
from trainhub.jobs.causes import STDERR_LINES
from trainhub.jobs.choices import TaskState
from trainhub.jobs.models import Task
from trainhub.jobs.services import (
    nodes_with_unstarted_stops,
    record_task_status,
    settle_unstarted_tasks,
)
from trainhub.jobs.services.stalls import record_stacks
from trainhub.nodes.capacity import CapacityReport, cap_to_reports
from trainhub.nodes.heartbeats import HeartbeatRecord, record_heartbeat, record_heartbeats
from trainhub.telemetry.budgets import lock_usages
from trainhub.telemetry.chunks import micros
from trainhub.telemetry.codec import Columns
from trainhub.telemetry.progress import record_progress
from trainhub.telemetry.selectors import stderr_tail
from trainhub.telemetry.services import ingest_logs, ingest_series

# The data lane's messages: stored in batches (`ingest_batch`).
DataMessage = Metrics | Logs | Progress | Stacks


class DataBatch(NamedTuple):
    """Data messages of one node's socket, received by `now`: stored together."""

    node_id: int
    messages: list[DataMessage]
    now: datetime


__all__ = [
    "DataBatch",
    "DataMessage",
    "ProtocolError",
    "apply_control",
    "apply_heartbeats",
    "handle_message",
    "ingest_batch",
    "ingest_batches",
]


def handle_message(*, node_id: int, message: object, now: datetime) -> None:
    """Apply one message (decoded JSON) from the agent of `node_id`.

    Raises:
        ProtocolError: the message does not follow docs/protocol.md; nothing changed.
    """
    parsed = parse_from_agent(message)
    if isinstance(parsed, Heartbeat | TaskStatus):
        apply_control(node_id=node_id, message=parsed, now=now)
    else:
        ingest_batch(node_id=node_id, messages=[parsed], now=now)


def apply_control(*, node_id: int, message: Heartbeat | TaskStatus, now: datetime) -> None:
    """A heartbeat or a task status: applied at once (a repeated status changes nothing)."""
    if isinstance(message, Heartbeat):
        _heartbeat(node_id, message, now)
    elif isinstance(message, TaskStatus):
        _task_status(node_id, message, now)
    else:
        assert_never(message)


def ingest_batch(
    *, node_id: int, messages: list[DataMessage], now: datetime
) -> list[tuple[int, Refusal]]:
    """Store several metrics, logs, progress and stacks messages of one node together: one
    lookup of their tasks, one insert (or update) per task and kind (the metrics of a
    task: one chunk per series), in one transaction. Returns the refused ones, by index:
    a message about a task attempt that does not run on this node."""
    with transaction.atomic():
        return ingest_batches([DataBatch(node_id, messages, now)])[0]


def ingest_batches(batches: Sequence[DataBatch]) -> list[list[tuple[int, Refusal]]]:
    """`ingest_batch` of several nodes' batches in the caller's transaction (the gateway's
    group commit, `agents.groups`): one lookup of every task they name; with more than
    one job, the jobs' budget rows are locked first, in id order, so that two groups
    never wait on each other's rows in opposite orders. The refusals of each batch."""
    keys = {(b.node_id, m.task) for b in batches for m in b.messages}
    tasks = {
        (t.node_id, TaskKey(t.pk, t.attempt)): t
        for t in Task.objects.filter(pk__in={key.id for _, key in keys})
        if (t.node_id, TaskKey(t.pk, t.attempt)) in keys
    }
    jobs = {t.job_id for t in tasks.values()}
    if len(jobs) > 1:
        lock_usages(jobs)
    return [_ingest_one(batch, tasks) for batch in batches]


def _ingest_one(
    batch: DataBatch, found: Mapping[tuple[int | None, TaskKey], Task]
) -> list[tuple[int, Refusal]]:
    """One node's batch, its tasks looked up (`found`, by node and key)."""
    now = batch.now
    tasks = {key: task for (node, key), task in found.items() if node == batch.node_id}
    refused: list[tuple[int, Refusal]] = []
    series: dict[TaskKey, dict[str, list[Columns]]] = defaultdict(lambda: defaultdict(list))
    lines: dict[tuple[TaskKey, str], list[str]] = defaultdict(list)
    progress: dict[TaskKey, list[ProgressItem]] = defaultdict(list)
    stacks: list[Stacks] = []
    for i, message in enumerate(batch.messages):
        if message.task not in tasks:
            why = f"no attempt {message.task.attempt} of task {message.task.id} runs on this node"
            refused.append((i, Refusal("id", why)))
        elif isinstance(message, Metrics):
            for name, columns in message.columns(now).items():
                series[message.task][name].append(_columns(columns, now))
        elif isinstance(message, Progress):
            progress[message.task].extend(message.items)
        elif isinstance(message, Stacks):
            stacks.append(message)
        else:
            lines[(message.task, message.stream.value)].extend(message.lines)
    for key, named in series.items():
        merged = {name: Columns.concat(parts) for name, parts in named.items()}
        ingest_series(task=tasks[key], series=merged, now=now)
    for (key, stream), output in lines.items():
        ingest_logs(task=tasks[key], stream=stream, lines=output, now=now)
    for key, items in progress.items():
        record_progress(task=tasks[key], items=items, now=now)
    for message in stacks:
        record_stacks(tasks[message.task], method=message.method.value, text=message.text, now=now)
    return refused


def _columns(columns: SeriesColumns, now: datetime) -> Columns:
    """A message's series as telemetry stores it: without times, every point at `now`."""
    times = columns.times
    if times is None:
        times = np.full(len(columns), micros(now), dtype=np.int64)
    return Columns(columns.steps, times, columns.values)


def apply_heartbeats(beats: dict[int, tuple[Heartbeat, datetime]]) -> None:
    """The latest heartbeat of each of many nodes, applied together: one UPDATE per set of
    fields, one query for tasks to settle (usually none), one for the capacity the nodes
    that report GPUs or totals offer (`nodes.capacity`)."""
    if not beats:
        return
    record_heartbeats([_record(node_id, hb, now) for node_id, (hb, now) in beats.items()])
    cap_to_reports(
        {node_id: _capacity(hb) for node_id, (hb, _) in beats.items()},
        now=max(now for _, now in beats.values()),
    )
    for node_id in nodes_with_unstarted_stops(list(beats)):
        heartbeat, now = beats[node_id]
        settle_unstarted_tasks(node_id=node_id, live=_live(heartbeat), now=now)


def _record(node_id: int, heartbeat: Heartbeat, now: datetime) -> HeartbeatRecord:
    usage: dict[str, Any] = dict(heartbeat.usage)
    if heartbeat.gpus:
        usage["gpus"] = [dict(g) for g in heartbeat.gpus]
    if heartbeat.ports_in_use:
        usage["ports_in_use"] = list(heartbeat.ports_in_use)
    isolation = heartbeat.isolation.value if heartbeat.isolation is not None else None
    return HeartbeatRecord(node_id, usage, now, isolation, heartbeat.agent_version)


def _capacity(heartbeat: Heartbeat) -> CapacityReport:
    return CapacityReport(
        gpus=frozenset(int(g["index"]) for g in heartbeat.gpus),
        cpus=heartbeat.cpus,
        memory_mb=heartbeat.memory_total_mb,
    )


def _live(heartbeat: Heartbeat) -> set[tuple[Any, Any]]:
    return {(t.task.id, t.task.attempt) for t in heartbeat.tasks}


def _heartbeat(node_id: int, heartbeat: Heartbeat, now: datetime) -> None:
    r = _record(node_id, heartbeat, now)
    record_heartbeat(
        node_id=node_id,
        usage=r.usage,
        now=now,
        isolation=r.isolation,
        agent_version=r.agent_version,
    )
    cap_to_reports({node_id: _capacity(heartbeat)}, now=now)
    settle_unstarted_tasks(node_id=node_id, live=_live(heartbeat), now=now)


def _task_status(node_id: int, status: TaskStatus, now: datetime) -> None:
    stderr: list[str] = []
    if status.state.value == TaskState.FAILED:
        # The failure causes read a traceback from it: the agent sends a task's status
        # after all of its output, so its last lines are stored by now.
        started = (
            Task.objects.filter(pk=status.task.id, attempt=status.task.attempt)
            .values_list("started_at", flat=True)
            .first()
        )
        stderr = stderr_tail(status.task.id, since=started, limit=STDERR_LINES)
    record_task_status(
        node_id=node_id,
        task_id=status.task.id,
        attempt=status.task.attempt,
        state=TaskState(status.state.value),
        exit_code=status.exit_code,
        message=status.message,
        now=now,
        stderr=stderr,
        oom_killed=status.oom_killed,
    )
