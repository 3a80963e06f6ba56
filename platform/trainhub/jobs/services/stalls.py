"""What happens to a stalled job (`jobs.stalls` decides that it is; telemetry's stall
check calls these): it is marked stalled, its agents take its tasks' stacks, and after the
spec's grace it restarts from its checkpoint, fails, or only stays marked.

- `mark_stalled`: `Job.stalled_at`, a `stall` event, `JobStalled` (notifications) and
  `StacksWanted` (the agent gateway sends `capture_stacks` to the job's nodes);
- `record_stacks`: a task's stacks, as an event of its job;
- `clear_stall`: progress resumed (a `resumed` event);
- `act_on_stall`: `on_stall` after the grace: restart (`restarts.restart_from_checkpoint`,
  cause `stalled`; a job with no restart left fails), stop (fails with cause `stalled`),
  notify (nothing more).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from trainhub.events import JobStalled, StacksWanted, publish

from ..causes import EndCause, EndFacts, classify, with_cause
from ..choices import TASK_ACTIVE, JobState
from ..models import Job, Task
from ..stalls import OnStall, StallSpec
from .restarts import restart_from_checkpoint
from .transitions import record_event, transition_job

ACTOR = "stall check"
# How much of a task's stacks its job's event quotes; its log holds them whole.
EVENT_STACK_CHARS = 8000


def stalled_cause(detail: str) -> EndCause:
    """The cause `stalled` (`jobs.causes`), its hint quoting `detail`."""
    return classify(EndFacts(state="stopped", exit_code=None, stalled=True, message=detail))


def _then(spec: StallSpec) -> str:
    if spec.on_stall == OnStall.NOTIFY:
        return "the spec's stall.on_stall is notify: nothing more is done"
    what = "restarted from its last checkpoint" if spec.on_stall == OnStall.RESTART else "stopped"
    return f"unless it resumes within {spec.grace_seconds:g} s, it is {what}"


@transaction.atomic
def mark_stalled(job_id: int, *, detail: str, spec: StallSpec, now: datetime) -> bool:
    """Mark a running job stalled (`detail`: for how long, its limit) and ask its nodes'
    agents for its tasks' stacks; False, changing nothing, if it is not running or is
    marked already."""
    if not Job.objects.filter(pk=job_id, state=JobState.RUNNING, stalled_at=None).update(
        stalled_at=now
    ):
        return False
    job = Job.objects.get(pk=job_id)
    reason = f"stalled: {detail}; taking its tasks' Python stacks; {_then(spec)}"
    record_event(job, kind="stall", reason=reason, actor=ACTOR, now=now)
    publish(JobStalled(job_id=job_id, reason=reason))
    nodes = Task.objects.filter(job_id=job_id, state__in=TASK_ACTIVE, node__isnull=False)
    node_ids = tuple(sorted(set(nodes.values_list("node_id", flat=True))))
    if node_ids:
        publish(StacksWanted(job_id=job_id, node_ids=node_ids))
    return True


@transaction.atomic
def clear_stall(job_id: int, *, reason: str, now: datetime) -> bool:
    """The job makes progress again (or runs anew): no longer stalled. False if it was not."""
    if not Job.objects.filter(pk=job_id, stalled_at__isnull=False).update(stalled_at=None):
        return False
    record_event(Job.objects.get(pk=job_id), kind="resumed", reason=reason, actor=ACTOR, now=now)
    return True


@transaction.atomic
def act_on_stall(job_id: int, *, detail: str, spec: StallSpec, now: datetime) -> str:
    """The spec's `on_stall` for a job still stalled after its grace: "restarted",
    "failed", or "" (notify; or nothing to do: it is not running and stalled any more)."""
    job = Job.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.state != JobState.RUNNING or job.stalled_at is None:
        return ""
    if spec.on_stall == OnStall.NOTIFY:
        return ""
    end = stalled_cause(detail)
    reason = f"stalled: {detail}"
    if spec.on_stall == OnStall.RESTART:
        if restart_from_checkpoint(
            job, reason=reason, cause=end.cause, hint=end.hint, actor=ACTOR, now=now
        ):
            Job.objects.filter(pk=job_id).update(stalled_at=None)  # a new run, judged anew
            return "restarted"
        reason += "; no restart is left"
    message = with_cause(reason, end)
    transition_job(
        job,
        JobState.FAILED,
        reason=message,
        actor=ACTOR,
        now=now,
        message=message,
        end_cause=end.cause,
        end_hint=end.hint,
    )
    return "failed"


def record_stacks(task: Task, *, method: str, text: str, now: datetime) -> None:
    """A task's Python stacks, taken after its job stalled, as an event of the job."""
    quoted = text if len(text) <= EVENT_STACK_CHARS else text[:EVENT_STACK_CHARS] + "\n…"
    record_event(
        task.job,
        kind="stacks",
        reason=f"{task.role} {task.index}: Python stacks ({method}; its log has them whole):"
        f"\n{quoted}",
        actor=f"node {task.node_id}",
        now=now,
    )
