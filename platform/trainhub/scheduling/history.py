"""The recorded history of the last days, as the simulator's input (the what-if replay).

Jobs are read as they were submitted: their spec (what they asked for), team, priority and
submit time; how long each ran comes from its state events (every interval between entering
and leaving `running`). The cluster is the nodes registered now (their history is not
recorded) and the quotas as they are now; the replay starts on an empty cluster at the
window's first submission, so jobs submitted before the window are left out.

A job's trace duration is its work at its minimum size: a job that ran with n workers for
t seconds did t * (n / min) ** 0.8 seconds of it (the simulator's own speed-up model).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db.models import Count, Q

from trainhub.jobs.choices import JobState, TaskRole
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job, JobEvent

from . import policy
from .cache import cluster_view
from .simulate.engine import SPEEDUP_EXPONENT
from .simulate.inputs import Cluster, TraceJob
from .snapshot import asked_of


@dataclass(frozen=True, slots=True)
class Recorded:
    """What actually happened to one job (times in seconds since the epoch)."""

    team: str
    submitted: float
    first_start: float
    finished: float | None  # None: still running at the end of the window
    run_s: float  # seconds spent running, over all its runs
    held: policy.Resources  # what it held while running, at its last size


@dataclass(frozen=True)
class History:
    since: datetime
    until: datetime
    cluster: Cluster
    trace: list[TraceJob]
    recorded: dict[int, Recorded]
    never_ran: int  # jobs submitted in the window that never ran (waiting or cancelled)


def _running_intervals(job_ids: list[int], until: datetime) -> dict[int, list[tuple[float, float]]]:
    """Each job's intervals in `running`, from its state events."""
    intervals: dict[int, list[tuple[float, float]]] = defaultdict(list)
    began: dict[int, float] = {}
    events = (
        JobEvent.objects.filter(job_id__in=job_ids)
        .filter(Q(to_state=JobState.RUNNING) | Q(from_state=JobState.RUNNING))
        .order_by("job_id", "time", "id")
        .values_list("job_id", "time", "from_state", "to_state")
    )
    for job_id, at, from_state, to_state in events.iterator(chunk_size=5000):
        t = at.timestamp()
        if from_state == JobState.RUNNING and job_id in began:
            intervals[job_id].append((began.pop(job_id), t))
        if to_state == JobState.RUNNING:
            began[job_id] = t
    for job_id, start in began.items():  # still running
        intervals[job_id].append((start, until.timestamp()))
    return intervals


def read_history(now: datetime, days: float) -> History:
    """The jobs submitted in the last `days` days that ran, with the cluster as it is now."""
    since = now - timedelta(days=days)
    jobs = list(
        Job.objects.filter(created_at__gte=since, created_at__lte=now)
        .annotate(workers=Count("tasks", filter=Q(tasks__role=TaskRole.WORKER)))
        .values_list("id", "team__slug", "priority", "spec", "created_at", "finished_at", "workers")
        .order_by("created_at", "id")
    )
    intervals = _running_intervals([row[0] for row in jobs], now)
    trace: list[TraceJob] = []
    recorded: dict[int, Recorded] = {}
    for job_id, team, priority, spec, created, finished, workers in jobs:
        ran = intervals.get(job_id)
        if not ran:
            continue
        asked = asked_of(JobSpec.from_dict(spec))
        n = min(max(workers, asked.workers_min), asked.workers_max)
        run_s = sum(end - start for start, end in ran)
        work = run_s * (n / asked.workers_min) ** SPEEDUP_EXPONENT
        trace.append(
            TraceJob(
                job_id,
                created.timestamp(),
                team,
                priority,
                max(1.0, work),
                asked.workers_min,
                asked.workers_max,
                asked.ps_count,
                asked.worker.cpu,
                int(asked.worker.gpu),
                asked.worker.memory_mb,
                checkpoint_every_s=asked.checkpoint_every_seconds or 1e9,  # 0: never
                ps_cpu=asked.ps.cpu,
                ps_memory_mb=asked.ps.memory_mb,
                coordinator_cpu=asked.coordinator.cpu,
                coordinator_memory_mb=asked.coordinator.memory_mb,
            )
        )
        held = asked.coordinator + asked.ps.times(asked.ps_count) + asked.worker.times(n)
        recorded[job_id] = Recorded(
            team,
            created.timestamp(),
            ran[0][0],
            None if finished is None else finished.timestamp(),
            run_s,
            policy.Resources(held.cpu, held.memory_mb, held.gpu),
        )
    snapshot = cluster_view(now).snapshot
    nodes = tuple(replace(n, state=policy.READY) for n in snapshot.nodes)
    return History(
        since,
        now,
        Cluster(nodes, snapshot.teams),
        trace,
        recorded,
        never_ran=len(jobs) - len(recorded),
    )
