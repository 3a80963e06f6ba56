"""Job and task states, their groups and the transition map."""

from __future__ import annotations

from django.db import models

# Priority classes belong to tenancy (teams cap what they run at each); re-exported here.
from trainhub.tenancy.choices import PRIORITY_WEIGHTS as PRIORITY_WEIGHTS
from trainhub.tenancy.choices import Priority as Priority


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    # A node is building the job's Python environment before its tasks start.
    PREPARING = "preparing", "Preparing"
    RUNNING = "running", "Running"
    PREEMPTED = "preempted", "Preempted"
    RESTARTING = "restarting", "Restarting"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


JOB_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
JOB_ACTIVE = frozenset(set(JobState) - JOB_TERMINAL)
# States in which the job holds tasks on nodes.
JOB_PLACED = frozenset(
    {JobState.STARTING, JobState.PREPARING, JobState.RUNNING, JobState.RESTARTING}
)

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.CANCELLED, JobState.FAILED}),
    JobState.STARTING: frozenset(
        {
            JobState.PREPARING,
            JobState.RUNNING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.RESTARTING,
            JobState.CANCELLED,
            JobState.PREEMPTED,
        }
    ),
    JobState.PREPARING: frozenset(
        {
            JobState.RUNNING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.RESTARTING,
            JobState.CANCELLED,
            JobState.PREEMPTED,
        }
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTED,
            JobState.RESTARTING,
        }
    ),
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.RESTARTING: frozenset(
        {
            JobState.RUNNING,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.SUCCEEDED,
            JobState.PREEMPTED,
        }
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def allowed_sources(target: JobState) -> frozenset[JobState]:
    """The states from which a job may move to `target`."""
    return frozenset(src for src, dsts in JOB_TRANSITIONS.items() if target in dsts)


class TaskRole(models.TextChoices):
    COORDINATOR = "coordinator", "Coordinator"
    PS = "ps", "Parameter server"
    WORKER = "worker", "Worker"


class TaskState(models.TextChoices):
    ASSIGNED = "assigned", "Assigned"  # placed on a node, process not yet reported
    PREPARING = "preparing", "Preparing"  # its node is building the job's environment
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"


TASK_TERMINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED})
TASK_ACTIVE = frozenset({TaskState.ASSIGNED, TaskState.PREPARING, TaskState.RUNNING})


class DesiredState(models.TextChoices):
    RUN = "run", "Run"
    STOP = "stop", "Stop"
