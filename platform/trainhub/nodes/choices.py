"""Node states."""

from django.db import models


class NodeState(models.TextChoices):
    ACTIVE = "active", "Active"
    CORDONED = "cordoned", "Cordoned"


SCHEDULABLE = frozenset({NodeState.ACTIVE})
