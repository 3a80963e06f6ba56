"""Preemption: a running job checkpoints, stops and goes back to the queue.

Three steps, each its own state change: `preempt_job` asks the coordinator to save a
checkpoint and stop; `advance_preemption` then stops the PS shards and workers, and once
every task is gone requeues the job (pending, to resume from its checkpoint).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from ps_runtime.taskenv import EXIT_STOPPED_AFTER_CHECKPOINT

from ..causes import EndFacts, classify
from ..choices import TASK_ACTIVE, DesiredState, JobState, TaskRole
from ..exits import exit_status
from ..models import Job, Task
from .transitions import notify_nodes, record_event, stop_tasks, transition_job

# The hint the table of causes gives a preempted task.
PREEMPTED_HINT = classify(EndFacts("stopped", None, preempted=True)).hint

# A coordinator asked to stop (SIGTERM) exits 0 once it saved a checkpoint
# (docs/protocol.md §2); anything else means the job resumes from its last periodic one.


@transaction.atomic
def preempt_job(
    *, job: Job, grace_seconds: float, reason: str, now: datetime, actor: str = "scheduler"
) -> bool:
    """Preempt a running job: its coordinator is asked to save a checkpoint and stop within
    `grace_seconds` while the PS shards and workers keep serving; then they are stopped
    too and the job is requeued (`advance_preemption`). False if the job is not running.
    """
    at_risk, every = work_since_checkpoint(job, now)
    spec = job.job_spec
    counts: dict[str, Any] = {}
    if "preempted" not in spec.retry.on:
        # The spec counts a preemption against max_restarts: one too many fails the job.
        if job.restarts >= spec.max_restarts:
            failed = (
                f"{reason}; the job fails: the spec's retry.on leaves out preempted and "
                f"its {spec.max_restarts} max_restarts are spent"
            )
            return transition_job(
                job,
                JobState.FAILED,
                reason=failed,
                actor=actor,
                now=now,
                message=failed,
                end_cause="preempted",
                end_hint=PREEMPTED_HINT,
            )
        counts["restarts"] = F("restarts") + 1
        reason = (
            f"{reason} (restart {job.restarts + 1} of {spec.max_restarts}: the spec's "
            "retry.on leaves out preempted)"
        )
    if not transition_job(
        job,
        JobState.PREEMPTED,
        reason=f"{reason}; asking its coordinator to save a checkpoint and stop "
        f"(grace {grace_seconds:g} s); without one it loses {_work(at_risk, every)}",
        actor=actor,
        now=now,
        preempted_at=now,
        preemptions=F("preemptions") + 1,
        end_cause="preempted",
        end_hint=PREEMPTED_HINT,
        **counts,
    ):
        return False
    coordinator = Task.objects.filter(
        job=job, role=TaskRole.COORDINATOR, state__in=TASK_ACTIVE, desired=DesiredState.RUN
    )
    node_ids = list(coordinator.values_list("node_id", flat=True))
    if node_ids:
        coordinator.update(desired=DesiredState.STOP)
        notify_nodes(node_ids)
    else:
        advance_preemption(job, now=now)
    return True


def work_since_checkpoint(job: Job, now: datetime) -> tuple[float, int]:
    """About how many seconds of work a stop now would throw away, and the checkpoint
    period: the coordinator checkpoints every `checkpoint_every_seconds` of running,
    counted from the job's latest start (0: never periodically)."""
    every = job.job_spec.checkpoint_every_seconds
    ran = 0.0 if job.started_at is None else max(0.0, (now - job.started_at).total_seconds())
    return (ran % every if every > 0 else ran), every


def _work(seconds: float, every: int) -> str:
    period = f"it checkpoints every {every} s" if every > 0 else "it never checkpoints by itself"
    return f"about {seconds:.0f} s of work since its last checkpoint ({period})"


def record_coordinator_stopped(
    job: Job, exit_code: int | None, *, actor: str, now: datetime
) -> None:
    """Note in the job's history whether its stopped coordinator saved a checkpoint."""
    if exit_code == EXIT_STOPPED_AFTER_CHECKPOINT:
        reason = "the coordinator saved a checkpoint and stopped"
    else:
        lost, every = work_since_checkpoint(job, now)
        reason = (
            f"the coordinator stopped without a new checkpoint ({exit_status(exit_code)}); "
            f"the job will resume from its last periodic checkpoint, losing {_work(lost, every)}"
        )
    record_event(job, kind="checkpoint", reason=reason, actor=actor, now=now)


def advance_preemption(job: Job, *, now: datetime, grace_seconds: float | None = None) -> None:
    """Move a preempted job on: once its coordinator is gone (or overdue by the grace
    period), stop the PS shards and workers; once every task is gone, requeue the job.
    Does nothing to a job that is not preempted."""
    job.refresh_from_db()
    if job.state != JobState.PREEMPTED:
        return
    active = Task.objects.filter(job=job, state__in=TASK_ACTIVE)
    coordinator_active = active.filter(role=TaskRole.COORDINATOR).exists()
    overdue = (
        grace_seconds is not None
        and job.preempted_at is not None
        and (now - job.preempted_at).total_seconds() > grace_seconds
    )
    if active.filter(desired=DesiredState.RUN).exists() and (not coordinator_active or overdue):
        record_event(
            job,
            kind="stop",
            reason="stopping its parameter servers and workers",
            actor="scheduler",
            now=now,
        )
        stop_tasks(job)
        return
    if active.exists():
        return
    # JobStateChanged(pending) tells the scheduler there is a job to place again.
    transition_job(
        job,
        JobState.PENDING,
        reason="requeued; it resumes from its checkpoint when it starts again",
        actor="scheduler",
        now=now,
        pending_since=now,
        preempted_at=None,
        # A held job says why it waits (`holds.hold_job`).
        pending_reason=job.pending_reason if job.held else "requeued after a preemption",
    )
