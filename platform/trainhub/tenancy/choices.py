"""Roles within a team."""

from django.db import models


class Role(models.TextChoices):
    ADMIN = "admin", "Team admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Roles that may submit and act on jobs.
SUBMITTERS = frozenset({Role.ADMIN, Role.MEMBER})
