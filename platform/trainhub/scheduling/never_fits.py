"""Jobs the cluster can never hold: their pending reason says so, and what to do.

Submission refuses a gang the counted nodes could never hold (`jobs/capacity.py`). A job
accepted before a node was drained, revoked or removed (or before that check existed)
may no longer fit; the policy would keep giving it a reason that promises a turn ("team
quota exhausted: …") and it would wait forever. After the policy has run, the cycle asks
`jobs.capacity.never_fits` of each job the policy left waiting (the same computation as
submission's, against the cluster's capacity read once per cycle: totals only, no
per-job query) and puts its answer in place of the policy's reason.
"""

from __future__ import annotations

from trainhub.jobs.capacity import ClusterCapacity, Gang, cluster_capacity, never_fits

from . import policy


def gang_of(job: policy.Job) -> Gang:
    """The policy job's gang at its smallest size, as `jobs.capacity` counts it."""
    return {
        "workers": (job.workers_min, job.worker),
        "parameter_servers": (job.ps_count, job.ps),
        "coordinator": (1, job.coordinator),
    }


def reword_never_fitting(
    snapshot: policy.Snapshot,
    decisions: policy.Decisions,
    capacity: ClusterCapacity | None = None,
) -> int:
    """Give each waiting job of `decisions` that the cluster could never hold the reason
    why; returns how many there are. `capacity` defaults to `cluster_capacity()`."""
    reasons = decisions.pending_reasons
    if not reasons:
        return 0
    capacity = cluster_capacity() if capacity is None else capacity
    count = 0
    for job in snapshot.jobs:
        if job.id in reasons:
            reason = never_fits(gang_of(job), capacity)
            if reason:
                reasons[job.id] = reason
                count += 1
    return count


__all__ = ["gang_of", "reword_never_fitting"]
