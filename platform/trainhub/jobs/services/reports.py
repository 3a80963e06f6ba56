"""What agents report about task processes, and what the job does about it: run, finish,
restart after a failure, or fail. Also tasks whose node was lost or never started them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction

from ps_runtime.taskenv import EXIT_ENVIRONMENT
from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import Node
from trainhub.nodes.quarantine import StartOutcome, note_task_end, start_outcome

from ..causes import NO_CAUSE, UNKNOWN, EndCause, EndFacts, classify, with_cause
from ..choices import JOB_PLACED, TASK_ACTIVE, DesiredState, JobState, TaskRole, TaskState
from ..exits import describe_exit
from ..models import Job, Task
from ..retries import decide
from .preemption import advance_preemption, record_coordinator_stopped
from .restarts import requeue_elsewhere, restart_in_place, spent
from .transitions import publish_task_state, record_event, transition_job

# Tasks with no process yet: placed, or waiting for their environment.
_UNSTARTED = (TaskState.ASSIGNED, TaskState.PREPARING)


@transaction.atomic
def record_task_status(
    *,
    node_id: int,
    task_id: int,
    attempt: int,
    state: TaskState,
    exit_code: int | None,
    message: str,
    now: datetime,
    stderr: Sequence[str] = (),
    oom_killed: bool = False,
) -> None:
    """Apply what an agent reported about one of its task processes.

    An end is classified (`jobs.causes`) from the report, the job's state and `stderr`,
    the end of the task's stderr that the caller read for it (oldest line first), and
    the cause and hint are stored on the task and, when it fails or restarts the job,
    on the job and in its history. A report about an earlier attempt, another node's
    task or a task already over, or a repeated `running`, is ignored: agents re-send
    what was not acknowledged, and a restarted task has a new attempt number.
    """
    task = (
        Task.objects.select_for_update()
        .select_related("job", "node")
        .filter(pk=task_id, node_id=node_id, attempt=attempt)
        .first()
    )
    if task is None or task.state not in TASK_ACTIVE:
        return
    if state == TaskState.RUNNING and task.state == TaskState.RUNNING:
        return  # a status sent again after a reconnection: already applied
    if state == TaskState.PREPARING:
        _preparing(task, message, actor=f"node {node_id}", now=now)
        return
    updates: dict[str, Any] = {"state": state}
    end = NO_CAUSE
    if state == TaskState.RUNNING:
        # Not the environment's progress, nor the last attempt's cause.
        updates.update(started_at=now, message="", end_cause="", end_hint="")
    else:
        end = _classify(task, state, exit_code, message, stderr, oom_killed)
        updates.update(
            finished_at=now,
            exit_code=exit_code,
            message=message[:2000],
            end_cause=end.cause,
            end_hint=end.hint,
        )
    Task.objects.filter(pk=task.pk).update(**updates)
    publish_task_state(task, state)
    actor = f"node {node_id}"
    if state == TaskState.RUNNING:
        _running(task.job, actor=actor, now=now)
        return
    if task.desired == DesiredState.STOP and task.job.state == JobState.FAILED:
        # Stopped because its job failed (however long that took): nothing about the node.
        outcome = StartOutcome.NEITHER
    else:
        outcome = start_outcome(
            failed=state == TaskState.FAILED and task.desired == DesiredState.RUN,
            succeeded=state == TaskState.SUCCEEDED,
            started_at=task.started_at,
            exit_code=exit_code,
            now=now,
        )
    _note_on_node(task, outcome, exit_code, message, now=now)
    _ended(task, state, exit_code, message, actor=actor, now=now, outcome=outcome, end=end)


def _classify(
    task: Task,
    state: TaskState,
    exit_code: int | None,
    message: str,
    stderr: Sequence[str],
    oom_killed: bool,
) -> EndCause:
    return classify(
        EndFacts(
            state=str(state),
            exit_code=exit_code,
            role=task.role,
            memory_mb=task.memory_mb,
            message=message,
            stderr=stderr,
            asked_to_stop=task.desired == DesiredState.STOP,
            preempted=task.job.state == JobState.PREEMPTED,
            oom_killed=oom_killed,
            node=task.node.hostname if task.node else "",
        )
    )


def _note_on_node(
    task: Task, outcome: StartOutcome, exit_code: int | None, message: str, *, now: datetime
) -> None:
    """Count the end on the task's node (`nodes.quarantine`); when it puts the node in
    quarantine, the job's history says so."""
    if task.node_id is None:
        return
    what = f"job {task.job_id} {task.role} {task.index}: " + (
        f"exit code {exit_code}" if exit_code is not None else "no exit code"
    )
    if message:
        what += f": {message[:200]}"
    reason = note_task_end(
        node_id=task.node_id, job_id=task.job_id, outcome=outcome, what=what, now=now
    )
    if reason:
        node = task.node.hostname if task.node else f"#{task.node_id}"
        record_event(
            task.job,
            kind="quarantine",
            reason=f"node {node} cordoned: {reason}",
            actor="scheduler",
            now=now,
        )


def _preparing(task: Task, message: str, *, actor: str, now: datetime) -> None:
    """The node builds the job's environment; the task's message says how far. The job
    shows `preparing` from the first such report until its tasks run."""
    if task.state == TaskState.RUNNING:
        return  # a late progress report
    Task.objects.filter(pk=task.pk).update(state=TaskState.PREPARING, message=message[:2000])
    publish_task_state(task, TaskState.PREPARING, message[:500])
    job = task.job
    if job.state == JobState.STARTING:
        node = task.node.hostname if task.node else "its node"
        transition_job(
            job,
            JobState.PREPARING,
            reason=f"building the job's Python environment on {node}",
            actor=actor,
            now=now,
        )


def _running(job: Job, *, actor: str, now: datetime) -> None:
    """The job runs once every task it wants is running."""
    wanted = Task.objects.filter(job=job, desired=DesiredState.RUN)
    if not wanted.exclude(state=TaskState.RUNNING).exists():
        transition_job(job, JobState.RUNNING, reason="all tasks running", actor=actor, now=now)


def _ended(
    task: Task,
    state: TaskState,
    exit_code: int | None,
    message: str,
    *,
    actor: str,
    now: datetime,
    outcome: StartOutcome = StartOutcome.NEITHER,
    end: EndCause = NO_CAUSE,
) -> None:
    """A task process is over: the job succeeds, restarts, fails, or carries on. The
    job's history and message say why, with the end's cause and hint."""
    job = task.job
    if job.state == JobState.PREEMPTED:
        if task.role == TaskRole.COORDINATOR:
            record_coordinator_stopped(job, exit_code, actor=actor, now=now)
        advance_preemption(job, now=now)
        return
    if state == TaskState.STOPPED or task.desired == DesiredState.STOP:
        return  # asked to stop, and it did
    if job.state not in JOB_PLACED:
        return
    if end.cause and (state != TaskState.SUCCEEDED or task.role == TaskRole.COORDINATOR):
        Job.objects.filter(pk=job.pk).update(end_cause=end.cause, end_hint=end.hint)
    if task.role == TaskRole.COORDINATOR and state == TaskState.SUCCEEDED:
        transition_job(
            job, JobState.SUCCEEDED, reason="coordinator exited with code 0", actor=actor, now=now
        )
        return
    if exit_code == EXIT_ENVIRONMENT:
        # The same packages fail the same way on any node: no restart is spent on it.
        detail = with_cause(f"{task.role} {task.index} could not start: {message}", end)
        transition_job(job, JobState.FAILED, reason=detail, actor=actor, now=now, message=detail)
        return
    what = f"{task.role} {task.index} {describe_exit(exit_code)}"
    # The agent's own message often says the same ("exited with code 3"): once is enough.
    detail = f"{what}: {message}" if message and message not in what else what
    spec = job.job_spec
    decision = decide(end if end.cause else UNKNOWN, spec.retry, spec.max_restarts, spent(job))
    if not decision.restart:
        detail = with_cause(f"{detail} ({decision.why})" if decision.why else detail, end)
        transition_job(job, JobState.FAILED, reason=detail, actor=actor, now=now, message=detail)
    elif outcome == StartOutcome.FAILED_AT_START and _place_again(task):
        node = task.node.hostname if task.node else "its node"
        detail = f"{detail}; it failed at start on {node}"
        requeue_elsewhere(job, detail, end, decision, actor=actor, now=now)
    else:
        restart_in_place(job, task, exit_code, detail, end, decision, actor=actor, now=now)


def _place_again(task: Task) -> bool:
    """Whether a task that failed at start restarts through the scheduler, which places
    it away from this node when it can, rather than on the same node: always when its
    job had not got going yet, and for a running job when the node is now out of service
    (quarantined). A running job's worker that failed once is relaunched in place."""
    if task.job.state != JobState.RUNNING or task.node_id is None:
        return True
    return not Node.objects.filter(pk=task.node_id, state=NodeState.ACTIVE).exists()


@transaction.atomic
def release_lost_nodes(*, lost_node_ids: list[int], lost_after_s: float, now: datetime) -> int:
    """End the tasks of nodes not heard from in time; their jobs go back to the queue to
    be placed on other nodes (a restart from the budget of `retry.on`), or fail when the
    spec's retry policy says so.

    Returns how many tasks were ended.
    """
    tasks = list(
        Task.objects.select_for_update()
        .filter(node_id__in=lost_node_ids, state__in=TASK_ACTIVE)
        .select_related("job", "node")
    )
    # Every lost task ends first; then each job, once (it may have several there).
    ended: dict[int, tuple[Job, str, EndCause]] = {}
    for task in tasks:
        stopping = task.desired == DesiredState.STOP
        hostname = task.node.hostname if task.node else "?"
        reason = f"node {hostname} lost: no heartbeat for {lost_after_s:g} s"
        state = TaskState.STOPPED if stopping else TaskState.FAILED
        facts = EndFacts(str(state), None, task.role, task.memory_mb, node_lost=True, node=hostname)
        end = classify(facts)
        Task.objects.filter(pk=task.pk).update(
            state=state, finished_at=now, message=reason, end_cause=end.cause, end_hint=end.hint
        )
        publish_task_state(task, state)
        if not stopping and task.job.state in JOB_PLACED:
            ended.setdefault(task.job_id, (task.job, reason, end))
    for job, reason, end in ended.values():
        decision = decide(end, job.job_spec.retry, job.job_spec.max_restarts, spent(job))
        if decision.restart:
            requeue_elsewhere(job, reason, end, decision, actor="scheduler", now=now)
            continue
        reason = with_cause(f"{reason} ({decision.why})" if decision.why else reason, end)
        transition_job(
            job,
            JobState.FAILED,
            reason=reason,
            actor="scheduler",
            now=now,
            message=reason,
            end_cause=end.cause,
            end_hint=end.hint,
        )
    return len(tasks)


@transaction.atomic
def nodes_with_unstarted_stops(node_ids: list[int]) -> set[int]:
    """Which of these nodes hold a task stopped before it started (one query; what
    `settle_unstarted_tasks` would look at)."""
    return set(
        Task.objects.filter(
            node_id__in=node_ids, state__in=_UNSTARTED, desired=DesiredState.STOP
        ).values_list("node_id", flat=True)
    )


def settle_unstarted_tasks(*, node_id: int, live: set[tuple[Any, Any]], now: datetime) -> int:
    """Tasks stopped before their agent started them will never be reported on: once the
    node's heartbeat (its live task attempts) shows they are not running, they are
    stopped. Returns how many were."""
    settled = 0
    # Twice: stopping a preempted job's coordinator this way stops its PS and workers.
    for _ in range(2):
        unstarted = [
            t
            for t in Task.objects.select_for_update()
            .filter(node_id=node_id, state__in=_UNSTARTED, desired=DesiredState.STOP)
            .select_related("job")
            if (t.pk, t.attempt) not in live
        ]
        if not unstarted:
            break
        Task.objects.filter(pk__in=[t.pk for t in unstarted]).update(
            state=TaskState.STOPPED,
            finished_at=now,
            message="stopped before it started",
            end_cause="stopped",
        )
        for task in unstarted:
            publish_task_state(task, TaskState.STOPPED)
        for job in {t.job_id: t.job for t in unstarted}.values():
            if job.state == JobState.PREEMPTED:
                advance_preemption(job, now=now)
        settled += len(unstarted)
    return settled
