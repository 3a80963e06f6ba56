"""The stall check: every `INTERVAL_SECONDS` (Celery beat), each running job's progress
(`progress.py`) is judged against its spec's `stall:` section (`jobs.stalls`), and the
jobs that stall, stay stalled past their grace, or resume go to the stall services
(`jobs.services.stalls`).

One query reads what the verdicts need (the running jobs' progress, `stalled_at` and
spec section: no whole spec, no task); two more, for the few jobs stalled or found
stalling, read when each last started running (a job is judged only from its first
progress in its current run) and which have a task being relaunched (not judged
meanwhile: the platform's own restart, maybe waiting out its backoff, is no stall).
Everything else is done only for those jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Max

from trainhub.jobs.choices import DesiredState, JobState, TaskState
from trainhub.jobs.models import JobEvent, Task
from trainhub.jobs.services.stalls import act_on_stall, clear_stall, mark_stalled
from trainhub.jobs.stalls import OnStall, StallSpec, judge

from .models import JobTelemetry
from .progress import Progress

INTERVAL_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class StallCheck:
    """What one check did: jobs judged, marked stalled, acted on, found resumed."""

    judged: int = 0
    stalled: int = 0
    acted: int = 0
    resumed: int = 0


@dataclass(frozen=True, slots=True)
class _Job:
    job_id: int
    spec: StallSpec
    progress: Progress
    stalled_at: datetime | None


def _running_since(job_ids: list[int]) -> dict[int, datetime]:
    """When each job last moved to running (one query)."""
    if not job_ids:
        return {}
    rows = (
        JobEvent.objects.filter(job_id__in=job_ids, kind="state", to_state=JobState.RUNNING)
        .values("job_id")
        .annotate(since=Max("time"))
    )
    return {row["job_id"]: row["since"] for row in rows}


def _relaunching(job_ids: list[int]) -> set[int]:
    """The jobs with a wanted task that is not running: a restart the platform itself is
    carrying out (a worker relaunched, waiting out its backoff) is no stall (one query)."""
    if not job_ids:
        return set()
    waiting = Task.objects.filter(job_id__in=job_ids, desired=DesiredState.RUN).exclude(
        state=TaskState.RUNNING
    )
    return set(waiting.values_list("job_id", flat=True))


def check_stalls(*, now: datetime) -> StallCheck:
    """Judge every running job that reported progress, and act on the verdicts."""
    rows: Any = JobTelemetry.objects.filter(
        job__state=JobState.RUNNING, progress__has_key="at"
    ).values_list("job_id", "progress", "job__stalled_at", "job__spec__stall")
    jobs = [
        _Job(job_id, StallSpec.from_dict(stall), Progress.load(progress), stalled_at)
        for job_id, progress, stalled_at, stall in rows
    ]
    # Jobs that may change: marked stalled already, or stalled by the verdict.
    watched = [job for job in jobs if job.stalled_at is not None or _stalled(job, now)]
    since = _running_since([job.job_id for job in watched])
    relaunching = _relaunching([job.job_id for job in watched])
    stalled = acted = resumed = 0
    for job in watched:
        at, run = job.progress.at, since.get(job.job_id)
        if job.stalled_at is not None and (
            (at is not None and at > job.stalled_at) or (run is not None and run > job.stalled_at)
        ):
            why = "progress resumed" if run is None or run <= job.stalled_at else "it runs anew"
            resumed += clear_stall(job.job_id, reason=_resumed(why, job, now), now=now)
            continue
        verdict = judge(job.spec, job.progress.view(), now, run_since=run)
        if verdict is None or not verdict.stalled or job.job_id in relaunching:
            continue
        detail = verdict.describe(job.spec)
        if job.stalled_at is None:
            stalled += mark_stalled(job.job_id, detail=detail, spec=job.spec, now=now)
        elif _graced(job, now):
            acted += bool(act_on_stall(job.job_id, detail=detail, spec=job.spec, now=now))
    return StallCheck(len(jobs), stalled, acted, resumed)


def _stalled(job: _Job, now: datetime) -> bool:
    verdict = judge(job.spec, job.progress.view(), now)
    return verdict is not None and verdict.stalled


def _graced(job: _Job, now: datetime) -> bool:
    """Stalled for its grace, with something left to do (notify does nothing more)."""
    assert job.stalled_at is not None
    waited = (now - job.stalled_at).total_seconds()
    return waited >= job.spec.grace_seconds and job.spec.on_stall != OnStall.NOTIFY


def _resumed(why: str, job: _Job, now: datetime) -> str:
    assert job.stalled_at is not None
    return f"{why} after {(now - job.stalled_at).total_seconds():.0f} s stalled"


__all__ = ["INTERVAL_SECONDS", "StallCheck", "check_stalls"]
