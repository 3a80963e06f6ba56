"""Quarantine: a node on which tasks keep failing at start is cordoned, saying why.

A node that cannot run tasks (a directory its task uids cannot read, a broken Python, a
sandbox that fails) fails every task within seconds, and every restart placed there fails
the same way. When the tasks of `NODE_QUARANTINE_AFTER` jobs in a row (3 by default; 0:
off) fail at start on it, it is cordoned with `quarantine_reason` on its page and in the
nodes list, and an audit entry (`node.quarantine`). Jobs, not tasks: a job with a bug of
its own (a mistyped entrypoint) fails all its tasks at once, on any node, and must not
take a node out by itself; a job placed here again after failing here counts once more
only after another job's task ran or failed in between. A task that ran resets the
count; so does an admin's uncordon (`services.set_node_state`), which also clears the
reason. The last ready node is never quarantined (a standalone's only node: nothing could
run anywhere, and three typos in a row would do it); its failures are only counted.

Which task ends count is decided by `start_outcome`; the jobs app reports every task end
here (`jobs.services.reports`).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from django.conf import settings
from django.db import transaction

from ps_runtime.taskenv import EXIT_ENVIRONMENT, EXIT_PS_LOST
from trainhub.audit.services import record_change
from trainhub.events import NodeChanged, publish

from .choices import NodeState
from .models import Node

NODE_QUARANTINED = "node.quarantine"
# The exit status `ps_runtime.agent.taskwrap` records when it cannot exec the task.
EXIT_CANNOT_EXEC = 127
# A job's own trouble, not its node's: the job's packages (the same on any node), or a
# parameter server lost elsewhere.
_NOT_THE_NODE = frozenset({EXIT_ENVIRONMENT, EXIT_PS_LOST})


class StartOutcome(Enum):
    FAILED_AT_START = "failed at start"  # counts towards quarantine
    RAN = "ran"  # resets the count
    NEITHER = "neither"  # says nothing about the node


def start_outcome(
    *,
    failed: bool,
    started_at: datetime | None,
    exit_code: int | None,
    now: datetime,
    succeeded: bool = False,
) -> StartOutcome:
    """What a task's end says about its node.

    Failed at start: the task failed before it ever ran (the agent could not launch it:
    no exit code, or 127), or exited with an error of its own within
    `NODE_START_FAILURE_SECONDS` of starting. A task killed by a signal (an OOM kill, an
    operator), or failing for a reason of the job's (its environment, a lost PS), says
    nothing about the node, and neither does one stopped (asked to, or with its job)
    within the window; a task that ran longer than that window, or succeeded, ran.
    """
    if failed and exit_code in _NOT_THE_NODE:
        return StartOutcome.NEITHER
    window = settings.NODE_START_FAILURE_SECONDS
    ran_for = None if started_at is None else (now - started_at).total_seconds()
    if not failed:
        if started_at is not None and (succeeded or (ran_for or 0.0) >= window):
            return StartOutcome.RAN
        return StartOutcome.NEITHER
    if exit_code is not None and (exit_code < 0 or exit_code > 128):
        return StartOutcome.NEITHER  # killed by a signal
    if ran_for is None or ran_for < window or exit_code == EXIT_CANNOT_EXEC:
        return StartOutcome.FAILED_AT_START
    return StartOutcome.RAN


@transaction.atomic
def note_task_end(
    *, node_id: int, job_id: int, outcome: StartOutcome, what: str, now: datetime
) -> str:
    """Count a task end of job `job_id` on the node; returns the quarantine reason when
    this end put the node in quarantine, else "".

    `what` names the task and how it ended ("job 7 worker 0: exit code 1: ..."), for the
    reason.
    """
    if outcome == StartOutcome.NEITHER:
        return ""
    node = Node.objects.select_for_update().filter(pk=node_id).first()
    if node is None:
        return ""
    if outcome == StartOutcome.RAN:
        if node.start_failures or node.start_failure_job_id is not None:
            Node.objects.filter(pk=node.pk).update(start_failures=0, start_failure_job_id=None)
        return ""
    if node.start_failure_job_id == job_id:
        return ""  # this job's failures here count once
    count = node.start_failures + 1
    limit: int = settings.NODE_QUARANTINE_AFTER
    if (
        limit <= 0
        or count < limit
        or node.state != NodeState.ACTIVE
        or not _another_ready_node(node, now)
    ):
        # Already out of service (cordoned, draining, awaiting approval), or the only node
        # that could run anything (a standalone's: cordoning it would stop every job, and
        # a newcomer's typos fail at start too): only counted.
        Node.objects.filter(pk=node.pk).update(start_failures=count, start_failure_job_id=job_id)
        return ""
    reason = (
        f"the tasks of {count} jobs in a row failed at start on this node (last: {what}); "
        "it was cordoned so that jobs stop failing here. Fix the node (its agent's log "
        "says more), then uncordon it."
    )[:1000]
    Node.objects.filter(pk=node.pk).update(
        start_failures=count,
        start_failure_job_id=job_id,
        state=NodeState.CORDONED,
        quarantine_reason=reason,
        quarantined_at=now,
    )
    record_change(
        actor=None,
        action=NODE_QUARANTINED,
        target=node,
        before={"state": node.state},
        after={"state": str(NodeState.CORDONED), "reason": reason},
        now=now,
    )
    publish(NodeChanged(node_id=node.pk, reason=NODE_QUARANTINED))
    return reason


def _another_ready_node(node: Node, now: datetime) -> bool:
    """Whether a node other than `node` is active and alive: where restarts could go."""
    return Node.objects.alive(now).filter(state=NodeState.ACTIVE).exclude(pk=node.pk).exists()


def clear_quarantine(node_id: int) -> None:
    """Forget the node's failed starts and quarantine reason (the caller holds the node's
    row lock: an uncordon)."""
    Node.objects.filter(pk=node_id).update(
        start_failures=0, start_failure_job_id=None, quarantine_reason="", quarantined_at=None
    )
