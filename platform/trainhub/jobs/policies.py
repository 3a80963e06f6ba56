"""Who may do what with jobs, as `can_<verb>(user, obj)` functions (the API and the web
pages ask these)."""

from __future__ import annotations

from trainhub.tenancy.policies import can_submit

from .models import Job


def can_cancel(user: object, job: Job) -> bool:
    return can_submit(user, job.team)


def can_scale(user: object, job: Job) -> bool:
    return can_submit(user, job.team)


def can_clone(user: object, job: Job) -> bool:
    return can_submit(user, job.team)
