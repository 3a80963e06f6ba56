"""Node states."""

from django.db import models


class NodeState(models.TextChoices):
    ACTIVE = "active", "Active"
    # No new tasks; what runs there keeps running.
    CORDONED = "cordoned", "Cordoned"
    # Being taken out of service (Slurm's DRAIN): no new tasks, running ones finish;
    # the API shows it as drained once nothing runs there.
    DRAINING = "draining", "Draining"


SCHEDULABLE = frozenset({NodeState.ACTIVE})


class NodeIsolation(models.TextChoices):
    """What the node's agent reports in its heartbeats (`ps_runtime.agent.isolation`)."""

    # Tasks run as the agent's user: the scheduler puts one team at a time on the node.
    NONE = "none", "None"
    UID = "uid", "Own uid per job"
    UID_CGROUP = "uid+cgroup", "Own uid per job and cgroup per task"
    SANDBOX = "sandbox", "Sandbox, own uid per job, cgroup per task"
    # Sandboxed, but every job as the agent's uid: one team at a time, like "none".
    SANDBOX_USER = "sandbox-user", "Sandbox as the agent's user"
    # The agent cannot sandbox and starts no task: the scheduler places nothing there.
    UNAVAILABLE = "unavailable", "Unavailable (the agent cannot sandbox tasks)"


# Isolation that keeps teams apart: their jobs may share the node.
TEAMS_APART = frozenset({NodeIsolation.UID, NodeIsolation.UID_CGROUP, NodeIsolation.SANDBOX})
