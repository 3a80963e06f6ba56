"""Roles within a team, and priority classes."""

from django.db import models


class Role(models.TextChoices):
    ADMIN = "admin", "Team admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Roles that may submit and act on jobs.
SUBMITTERS = frozenset({Role.ADMIN, Role.MEMBER})
# Roles that may change the team's membership.
MEMBERSHIP_MANAGERS = frozenset({Role.ADMIN})


class Priority(models.TextChoices):
    """Priority classes of jobs (DESIGN.md §2); a team may cap what it runs at each."""

    EXPERIMENT = "experiment", "Experiment"
    OFFLINE = "offline", "Offline"
    NORMAL = "normal", "Normal"
    PRODUCTION = "production", "Production"


PRIORITY_WEIGHTS: dict[str, int] = {
    Priority.EXPERIMENT: 10,
    Priority.OFFLINE: 100,
    Priority.NORMAL: 1000,
    Priority.PRODUCTION: 10000,
}
