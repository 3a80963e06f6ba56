"""Who may do what with registered models (`can_<verb>(user, obj)`)."""

from __future__ import annotations

from trainhub.jobs.models import Job
from trainhub.tenancy.policies import can_submit


def can_register_model(user: object, job: Job) -> bool:
    """Who may submit jobs to the job's team registers its models; viewers download."""
    return can_submit(user, job.team)
