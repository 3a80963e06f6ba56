"""Who may do what, as `can_<verb>(user, obj)` functions."""

from __future__ import annotations

from trainhub.jobs.models import Job
from trainhub.tenancy.selectors import can_submit


def can_cancel(user: object, job: Job) -> bool:
    return can_submit(user, job.team)
