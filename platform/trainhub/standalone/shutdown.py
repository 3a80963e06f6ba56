"""Stopping standalone without losing work: every job that runs saves a checkpoint, stops
and goes back to the queue (`preempted → pending`), so the next start resumes it.

The scheduler (worker and beat) is stopped first, so nothing places the requeued jobs
again; the web process and the agents stay up meanwhile: the coordinators' stop reports
come in through the agent gateway and move each preemption on (docs/design.md, "Standalone").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.jobs.services import advance_preemption, preempt_job

# States in which a job has (or is about to have) tasks on a node.
_HOLDING = (JobState.STARTING, JobState.PREPARING, JobState.RUNNING, JobState.RESTARTING)
# Beyond the coordinators' grace: time for the shards and workers to stop and report.
STOP_SLACK_SECONDS = 20.0
REASON = "TrainHub standalone is stopping; the job resumes from its checkpoint at its next start"


@dataclass(frozen=True)
class DrainResult:
    requeued: list[int]  # jobs that went back to the queue
    unfinished: list[int]  # jobs still preempted when the wait ended (stopped regardless)


def preempt_running_jobs() -> list[int]:
    """Ask every job holding tasks to save a checkpoint and stop; their ids."""
    now = timezone.now()
    ids = []
    for job in Job.objects.filter(state__in=_HOLDING).order_by("pk"):
        if preempt_job(
            job=job,
            grace_seconds=settings.PREEMPTION_GRACE_SECONDS,
            reason=REASON,
            now=now,
            actor="standalone",
        ):
            ids.append(job.pk)
    return ids


def requeue_all(
    *,
    timeout: float | None = None,
    interrupted: Callable[[], bool] = lambda: False,
    progress: Callable[[str], None] = print,
    poll: float = 0.5,
) -> DrainResult:
    """Preempt every job holding tasks and wait until each is back in the queue, at most
    `timeout` seconds (default: the preemption grace plus `STOP_SLACK_SECONDS`) or until
    `interrupted()`. A preempted job whose coordinator outlives the grace has its other
    tasks stopped regardless (what the scheduler's cycle would do)."""
    grace = float(settings.PREEMPTION_GRACE_SECONDS)
    if timeout is None:
        timeout = grace + STOP_SLACK_SECONDS
    preempt_running_jobs()
    waiting = list(
        Job.objects.filter(state=JobState.PREEMPTED).order_by("pk").values_list("pk", flat=True)
    )
    if not waiting:
        return DrainResult([], [])
    progress(
        f"TrainHub standalone: {len(waiting)} job(s) saving a checkpoint before stopping "
        f"(at most {timeout:.0f} s; Ctrl-C again stops at once, and they resume from their "
        "last periodic checkpoint)"
    )
    deadline = time.monotonic() + timeout
    left = waiting
    while left and time.monotonic() < deadline and not interrupted():
        now = timezone.now()
        for job in Job.objects.filter(pk__in=left, state=JobState.PREEMPTED):
            advance_preemption(job, now=now, grace_seconds=grace)
        left = list(
            Job.objects.filter(pk__in=left, state=JobState.PREEMPTED).values_list("pk", flat=True)
        )
        if left:
            time.sleep(poll)
    requeued = [pk for pk in waiting if pk not in left]
    if requeued:
        progress(
            f"TrainHub standalone: requeued job(s) {', '.join(map(str, requeued))}; "
            "they resume at the next start"
        )
    if left:
        progress(
            f"TrainHub standalone: job(s) {', '.join(map(str, left))} did not stop in time; "
            "stopping them now (they resume from their last periodic checkpoint)"
        )
    return DrainResult(requeued, left)
