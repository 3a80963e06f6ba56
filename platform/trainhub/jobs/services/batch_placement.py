"""Starting many jobs that never ran, in a fixed number of queries (a scheduling cycle's
starts), with the same effect as `place_job` on each: the job moves pending → starting
under a row lock, its history gets the same event, its tasks are created on their nodes,
its TLS is decided by its nodes' addresses, and its nodes are told.

A cycle that starts 600 queued jobs one `place_job` at a time made about eight queries per
job (5.5 s on PostgreSQL); here it is six queries in all, the rows written by COPY
(`jobs/rows.py`). A job that gets TLS gets its CA row here, signed when a node first asks
(`tls.node_material`): signing takes 0.4 ms per job, 2.5 s of a cycle that starts 6,000.
Jobs placed before (requeued after a preemption or a restart) have task slots to reuse and
go through `place_job`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from trainhub.events import JobEventRecorded, JobStateChanged, publish

from .. import pki
from ..choices import DesiredState, JobState, TaskState, allowed_sources
from ..models import Job, JobEvent, RuntimeCA, Task
from ..rows import insert_rows
from .placement import Placement, place_job, placement_reason
from .tls import UNSIGNED
from .transitions import notify_nodes

ACTOR = "scheduler"


@dataclass(frozen=True)
class Start:
    """One job to start: where its tasks go, and the addresses of those nodes."""

    job: Job
    placements: list[Placement]
    hosts: list[str]


@transaction.atomic
def place_jobs(starts: list[Start], *, now: datetime, tls_mode: str) -> list[Job]:
    """Start every job of `starts` that is still pending; the jobs that were started.

    `tls_mode`: `TRAINHUB_RUNTIME_TLS`. A job cancelled meanwhile is left as it is (as
    `place_job` leaves it)."""
    fresh = [s for s in starts if s.job.started_at is None]
    started = [
        s.job
        for s in starts
        if s.job.started_at is not None
        and place_job(job=s.job, placements=s.placements, now=now, hosts=s.hosts)
    ]
    if not fresh:
        return started
    by_id = {s.job.pk: s for s in fresh}
    won = set(
        Job.objects.select_for_update()
        .filter(pk__in=list(by_id), state__in=allowed_sources(JobState.STARTING), held=False)
        .values_list("pk", flat=True)
    )
    if not won:
        return started
    Job.objects.filter(pk__in=won).update(
        state=JobState.STARTING,
        pending_reason="",
        started_at=now,
        last_rescale_at=now,
        pending_since=None,
    )
    events, tasks, cas = [], [], []
    for job_id in sorted(won):
        s = by_id[job_id]
        job, from_state = s.job, s.job.state
        job.state, job.pending_reason = JobState.STARTING, ""
        job.started_at = job.last_rescale_at = now
        job.pending_since = None
        reason = placement_reason(s.placements)
        events.append((job_id, now, "state", from_state, JobState.STARTING, reason, ACTOR))
        tasks += [_task_row(job_id, p, now) for p in s.placements]
        if pki.tls_wanted(tls_mode, s.hosts):  # a job never placed has no CA yet
            cas.append((job_id, UNSIGNED, "", now))  # signed when a node first asks
        started.append(job)
    insert_rows(JobEvent, EVENT_FIELDS, events)
    insert_rows(Task, TASK_FIELDS, tasks)
    insert_rows(RuntimeCA, CA_FIELDS, cas)
    for job_id, _, kind, from_state, to_state, reason, _ in events:
        publish(
            JobEventRecorded(
                job_id=job_id,
                time=now.isoformat(),
                kind=kind,
                reason=reason,
                actor=ACTOR,
                from_state=from_state,
                to_state=to_state,
            )
        )
        publish(JobStateChanged(job_id=job_id, state=JobState.STARTING, message=""))
    notify_nodes(p.node_id for s in by_id.values() for p in s.placements)
    return started


EVENT_FIELDS = ("job_id", "time", "kind", "from_state", "to_state", "reason", "actor")
# Every field of a new task, as `new_task` (and the model's defaults) make it.
TASK_FIELDS = (
    "job_id",
    "role",
    "index",
    "attempt",
    "state",
    "desired",
    "node_id",
    "port",
    "cpu",
    "memory_mb",
    "gpu_indices",
    "borrowed",
    "rejoin",
    "exit_code",
    "message",
    "created_at",
    "started_at",
    "finished_at",
)
CA_FIELDS = ("job_id", "cert", "sealed_key", "created_at")


def _task_row(job_id: int, p: Placement, now: datetime) -> tuple[Any, ...]:
    return (
        job_id,
        str(p.role),
        p.index,
        1,
        TaskState.ASSIGNED,
        DesiredState.RUN,
        p.node_id,
        p.port,
        p.cpu,
        p.memory_mb,
        p.gpu_indices,
        p.borrowed,
        False,  # rejoin: a first attempt starts afresh
        None,
        "",
        now,
        None,
        None,
    )
