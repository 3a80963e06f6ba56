"""Would a job start now if it were submitted? (`POST jobs/?dry_run=true`, the submit page's
preview).

The answer comes from the live policy itself: the cluster as the next cycle would read it
(`cache.cluster_view`: this process's copy, checked against the database first), plus the
job as a hypothetical pending one, through `policy.schedule` — in memory, stopping once the
job is decided (`until`). Nothing is written, no event is published and no cycle is
requested, so a preview changes nothing, however often it is asked.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache

from trainhub.jobs.capacity import NEVER_FITS
from trainhub.jobs.choices import JOB_ACTIVE, JobState
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job
from trainhub.jobs.services import check_submission

from . import policy
from .cache import cluster_view
from .forecast import estimate_start
from .models import CycleRecord
from .queue import position_if_submitted
from .snapshot import asked_of

# The hypothetical job's id in the snapshot: real ids are positive, so it never clashes.
PREVIEW_JOB_ID = -1
# Expected runtimes come from the jobs that succeeded in this many days.
HISTORY_DAYS = 30
FORECAST_CACHE_SECONDS = 30


@dataclass(frozen=True)
class Preview:
    """What a submission would meet now.

    `reason` is empty when the job fits now, else the pending reason the scheduler would
    give it. `estimated_start` is `now` when it fits; when the policy would free capacity
    for it (preempting or shrinking borrowers), now plus the preemption grace period;
    otherwise the forecast's answer (`forecast.py`: the policy run forward as running jobs
    end at their expected time), or None when that is unknown.
    """

    fits_now: bool
    position: int
    reason: str
    estimated_start: datetime | None


def hypothetical_job(spec: JobSpec, *, now: datetime) -> policy.Job:
    """`spec` as the policy sees a job that was just submitted."""
    asked = asked_of(spec)
    return policy.Job(
        id=PREVIEW_JOB_ID,
        team=spec.team,
        priority=spec.priority,
        state=policy.PENDING,
        submit_time=now.timestamp(),
        worker=asked.worker,
        workers_min=asked.workers_min,
        workers_max=asked.workers_max,
        ps_count=asked.ps_count,
        ps=asked.ps,
        coordinator=asked.coordinator,
        freeze_seconds=asked.freeze_seconds,
        pending_since=now.timestamp(),
    )


def preview_submission(spec: JobSpec, *, now: datetime) -> Preview:
    """Run the scheduling policy on the cluster as it is, with `spec` added as pending.

    `spec` is a validated spec (`parse_job_spec`): a preview refuses what a submission
    refuses, with the same errors.

    Raises:
        PriorityCapExceeded: the team's cap for the job's priority has no room for it.
    """
    check_submission(spec=spec)
    view = cluster_view(now)
    snapshot = dataclasses.replace(
        view.snapshot, jobs=(*view.snapshot.jobs, hypothetical_job(spec, now=now))
    )
    began = time.perf_counter()
    decisions = policy.schedule(snapshot, settings.SCHEDULER_POLICY, until=PREVIEW_JOB_ID)
    run_s = time.perf_counter() - began  # a lower bound of a whole run's time
    position = position_if_submitted(spec.priority, now=now)
    if any(start.job_id == PREVIEW_JOB_ID for start in decisions.starts):
        return Preview(fits_now=True, position=position, reason="", estimated_start=now)
    reserved = any(r.job_id == PREVIEW_JOB_ID for r in decisions.reservations)
    if reserved:
        estimate: datetime | None = now + timedelta(
            seconds=snapshot.config.preemption_grace_seconds
        )
    else:
        runtimes = _runtimes(now)
        estimate = (
            None
            if runtimes is None
            else _forecast(
                snapshot,
                PREVIEW_JOB_ID,
                runtimes,
                name=spec.name,
                run_s=run_s,
                names=view.job_names,
            )
        )
    reason = decisions.pending_reasons.get(PREVIEW_JOB_ID, "waiting for the next scheduling cycle")
    return Preview(fits_now=False, position=position, reason=reason, estimated_start=estimate)


def forecast_start(job: Job, *, now: datetime) -> datetime | None:
    """When a pending job is expected to start (None: unknown); kept 30 s per job, since
    the job page asks every 10 s and the forecast reads the whole cluster. None without a
    forecast for a job the last cycle found the cluster can never hold (`never_fits.py`):
    it has no start to expect."""
    if job.pending_reason.startswith(NEVER_FITS):
        return None
    key = f"trainhub:forecast:{job.pk}"
    cached = cache.get(key)
    if cached is not None:
        return cached[0]
    at = None
    runtimes = _runtimes(now) if job.state == JobState.PENDING else None
    if runtimes is not None:
        view = cluster_view(now)
        at = _forecast(view.snapshot, job.pk, runtimes, names=view.job_names)
    cache.set(key, (at,), FORECAST_CACHE_SECONDS)
    return at


@dataclass(frozen=True)
class _Runtimes:
    """Median runtime of the jobs that succeeded in the last `HISTORY_DAYS` days, per team
    and job name and per team."""

    by_name: dict[tuple[str, str], float]
    by_team: dict[str, float]


def _runtimes(now: datetime) -> _Runtimes | None:
    """What the forecast expects jobs to run; None without any history."""
    by_name: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_team: dict[str, list[float]] = defaultdict(list)
    done = Job.objects.filter(
        state=JobState.SUCCEEDED,
        finished_at__gte=now - timedelta(days=HISTORY_DAYS),
        started_at__isnull=False,
    ).values_list("team__slug", "name", "started_at", "finished_at")
    for team, name, started, finished in done:
        if started is None or finished is None:  # filtered out above; for the type checker
            continue
        seconds = (finished - started).total_seconds()
        by_name[(team, name)].append(seconds)
        by_team[team].append(seconds)
    if not by_team:
        return None
    return _Runtimes(
        {key: statistics.median(v) for key, v in by_name.items()},
        {team: statistics.median(v) for team, v in by_team.items()},
    )


def _forecast(
    snapshot: policy.Snapshot,
    job_id: int,
    runtimes: _Runtimes,
    *,
    name: str | None = None,
    run_s: float = 0.0,
    names: dict[int, str] | None = None,
) -> datetime | None:
    """When the forecast would start job `job_id` (`name`: the hypothetical job's name). A
    job is expected to run the median runtime of its team's jobs of the same name, else of
    all its team's; one running past its expected end is expected to end now. `names`:
    the active jobs' names when the caller has them (else read)."""
    if names is None:
        names = dict(Job.objects.filter(state__in=JOB_ACTIVE).values_list("pk", "name"))
    else:
        names = dict(names)
    if name is not None:
        names[job_id] = name

    def runtime(job: policy.Job) -> float | None:
        found = runtimes.by_name.get((job.team, names.get(job.id, "")))
        return found if found is not None else runtimes.by_team.get(job.team)

    # A whole run takes about what the last cycle's policy run took; a dry run's own run
    # stops at its job, so its time alone is only a lower bound.
    run_s = max(run_s, _last_policy_seconds())
    ends = {}
    for job in snapshot.jobs:
        expected = runtime(job) if job.state == policy.RUNNING else None
        if expected is not None:
            ends[job.id] = max(snapshot.now, (job.started_at or snapshot.now) + expected)
    at = estimate_start(
        snapshot,
        job_id,
        ends=ends,
        runtime=runtime,
        policy_name=settings.SCHEDULER_POLICY,
        run_s=run_s,
    )
    return None if at is None else datetime.fromtimestamp(at, tz=UTC)


def _last_policy_seconds() -> float:
    """How long the last cycle's policy run took (0 before the first cycle)."""
    summary = CycleRecord.objects.values_list("summary", flat=True).first()
    return float((summary or {}).get("policy_seconds", 0.0))
