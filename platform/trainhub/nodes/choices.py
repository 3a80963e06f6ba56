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
