"""Carrying out a restart (`jobs.retries` decides whether): in place on the same nodes,
or back to the queue to be placed elsewhere; waiting out the backoff first.

A restart in place starts the next attempt of the tasks it concerns with `not_before`
set to the end of its backoff: the agents do not see those attempts
(`selectors.desired_tasks`) until `release_due_restarts` lets them go — queued when the
restart is decided (`RestartsWaiting`) and swept by every scheduling cycle, so a lost
message delays a restart by one cycle at most. The tasks keep their place on their nodes
meanwhile.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q

from ps_runtime.taskenv import EXIT_PS_LOST
from trainhub.events import RestartsWaiting, publish

from ..causes import EndCause, with_cause
from ..choices import JOB_PLACED, DesiredState, JobState, TaskRole
from ..models import Job, Task
from ..retries import Budget, Decision, Spent, decide
from .placement import new_attempt
from .preemption import advance_preemption
from .transitions import notify_nodes, record_event, stop_tasks, transition_job


def spent(job: Job) -> Spent:
    return Spent(job.restarts, job.infra_restarts, job.last_error)


def spend(job: Job, decision: Decision, end: EndCause) -> None:
    """Count the restart in its budget; the end's signature is the job's last error."""
    counter = "infra_restarts" if decision.budget == Budget.INFRA else "restarts"
    Job.objects.filter(pk=job.pk).update(**{counter: F(counter) + 1}, last_error=end.signature)


def _waiting(delay_s: float, now: datetime) -> tuple[datetime | None, str]:
    if delay_s <= 0:
        return None, ""
    return now + timedelta(seconds=delay_s), f" in {delay_s:g} s"


def _relaunch(job: Job, tasks: list[Task], delay_s: float, now: datetime, **fields: bool) -> None:
    """The next attempt of `tasks`, once the backoff is over."""
    not_before, _ = _waiting(delay_s, now)
    new_attempt(Task.objects.filter(pk__in=[t.pk for t in tasks]), not_before=not_before, **fields)
    if not_before is None:
        notify_nodes(t.node_id for t in tasks)
    else:
        publish(RestartsWaiting(job_id=job.pk, delay_s=delay_s))


def restart_in_place(
    job: Job,
    task: Task,
    exit_code: int | None,
    detail: str,
    end: EndCause,
    decision: Decision,
    *,
    actor: str,
    now: datetime,
) -> None:
    """A lost worker is relaunched alone (the coordinator re-runs its closures), and so is
    a lost PS of a job with replicated shards (it copies them from a live replica); a
    lost PS of an unreplicated job, a replacement PS that found no replica to copy from
    (exit 75), or the coordinator restart every task, and the coordinator resumes from
    the job's last checkpoint."""
    spend(job, decision, end)
    _, when = _waiting(decision.delay_s, now)
    replaceable = (
        task.role == TaskRole.PS
        and job.job_spec.parameter_servers.replication > 0
        and exit_code != EXIT_PS_LOST
    )
    if task.role == TaskRole.WORKER or replaceable:
        how = (
            f"relaunching it{when}"
            if task.role == TaskRole.WORKER
            else f"relaunching it{when}; it copies its shards from a live replica while the "
            "job runs on"
        )
        reason = with_cause(f"{detail}; {how} ({decision.why})", end)
        record_event(job, kind="restart", reason=reason, actor=actor, now=now)
        _relaunch(job, [task], decision.delay_s, now, rejoin=replaceable)
        return
    restart_job(job, f"{detail}; restarting the job{when}", end, decision, actor=actor, now=now)


def restart_job(
    job: Job, detail: str, end: EndCause, decision: Decision, *, actor: str, now: datetime
) -> None:
    """Every wanted task (not scaled-away workers) starts again; the coordinator resumes
    from the last checkpoint."""
    transition_job(
        job,
        JobState.RESTARTING,
        reason=with_cause(f"{detail} from its last checkpoint ({decision.why})", end),
        actor=actor,
        now=now,
    )
    tasks = list(Task.objects.filter(job=job, desired=DesiredState.RUN))
    _relaunch(job, tasks, decision.delay_s, now)


def requeue_elsewhere(
    job: Job, detail: str, end: EndCause, decision: Decision, *, actor: str, now: datetime
) -> None:
    """Spend a restart on placing the job again: its tasks stop and it goes back to the
    queue (as after a preemption: `advance_preemption` requeues it once they are gone),
    and the scheduler places it on other nodes than those where its tasks just failed
    (`scheduling.snapshot`), when any fits."""
    spend(job, decision, end)
    transition_job(
        job,
        JobState.PREEMPTED,
        reason=with_cause(
            f"{detail}: stopping the job's tasks to place it again, on other nodes first "
            f"({decision.why})",
            end,
        ),
        actor=actor,
        now=now,
        preempted_at=now,
        end_cause=end.cause,
        end_hint=end.hint,
    )
    stop_tasks(job)
    advance_preemption(job, now=now)


@transaction.atomic
def restart_from_checkpoint(
    job: Job, *, reason: str, cause: str, hint: str = "", actor: str, now: datetime
) -> bool:
    """Restart every task of a placed job from its last checkpoint after `cause` (a stall,
    say), from the budget the spec's retry policy names for it; False, changing nothing,
    when that budget is spent or the job is not placed."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state not in JOB_PLACED:
        return False
    end = EndCause(cause, hint)
    decision = decide(end, job.job_spec.retry, job.job_spec.max_restarts, spent(job))
    if not decision.restart:
        return False
    spend(job, decision, end)
    Job.objects.filter(pk=job.pk).update(end_cause=cause, end_hint=hint)
    _, when = _waiting(decision.delay_s, now)
    restart_job(job, f"{reason}; restarting the job{when}", end, decision, actor=actor, now=now)
    return True


@transaction.atomic
def release_due_restarts(now: datetime) -> int:
    """Let the agents start the restarted attempts whose backoff is over; how many."""
    due = Task.objects.select_for_update().filter(
        Q(not_before__isnull=False) & Q(not_before__lte=now)
    )
    node_ids = list(due.values_list("node_id", flat=True))
    count = due.update(not_before=None)
    notify_nodes(node_ids)
    return count
