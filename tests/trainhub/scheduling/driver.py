"""A minimal driver for policy tests: applies decisions to a snapshot like the platform would
(victims stop at once, at the end of their grace period)."""

from __future__ import annotations

from dataclasses import replace

from trainhub.scheduling.policy import (
    PENDING,
    RUNNING,
    WORKER,
    Decisions,
    Job,
    Snapshot,
    Task,
)


def apply(snapshot: Snapshot, d: Decisions, now: float) -> Snapshot:
    jobs = {j.id: j for j in snapshot.jobs}
    for p in d.preemptions:
        j = jobs[p.job_id]
        jobs[j.id] = replace(j, state=PENDING, tasks=(), pending_since=now)
    for r in d.remove_workers:
        j = jobs[r.job_id]
        tasks = tuple(t for t in j.tasks if not (t.role == WORKER and t.index == r.index))
        jobs[j.id] = replace(j, tasks=tasks, last_rescale_time=now)
    for s in d.starts:
        j = jobs[s.job_id]
        tasks = tuple(Task(p.role, p.index, p.node_id, p.resources, p.borrowed) for p in s.tasks)
        jobs[j.id] = replace(j, state=RUNNING, tasks=tasks, started_at=now, last_rescale_time=now)
    for a in d.add_workers:
        j = jobs[a.job_id]
        placed = a.task
        task = Task(placed.role, placed.index, placed.node_id, placed.resources, placed.borrowed)
        jobs[j.id] = replace(j, tasks=(*j.tasks, task), last_rescale_time=now)
    return replace(
        snapshot,
        now=now,
        jobs=tuple(jobs[k] for k in sorted(jobs)),
        reservations=tuple(d.reservations),
    )


def workers(job: Job) -> int:
    return sum(1 for t in job.tasks if t.role == WORKER)


def job(snapshot: Snapshot, job_id: int) -> Job:
    return next(j for j in snapshot.jobs if j.id == job_id)
