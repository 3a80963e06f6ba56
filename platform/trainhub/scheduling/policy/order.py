"""The order in which pending jobs are considered (CFS-like, with aging).

Across teams the team with the least virtual runtime goes first: its dominant-resource
share of the cluster divided by its quota share (a team that holds less than it is
entitled to is "behind"), recomputed after every start. Within a team, the higher
priority level goes first; every `aging_seconds_per_level` of waiting lifts a job one
level (up to production's), so a low-priority job behind a stream of higher-priority ones
waits at most 3 x that before it is first in its team. Ties go to the least job virtual
runtime (resources held x time / priority weight, so preempted work that already ran a
lot yields to fresh work), then to the earliest submission.
"""

from __future__ import annotations

import math

from .model import PRIORITY_WEIGHTS, Job, Resources

TOP_LEVEL = 3  # production
_LEVELS = {name: round(math.log10(w)) - 1 for name, w in PRIORITY_WEIGHTS.items()}


def level(job: Job, now: float, aging_seconds_per_level: float) -> int:
    base = _LEVELS[job.priority]
    waited = max(
        0.0, now - (job.pending_since if job.pending_since is not None else job.submit_time)
    )
    if aging_seconds_per_level > 0:
        base += int(waited // aging_seconds_per_level)
    return min(TOP_LEVEL, base)


def team_queue_key(job: Job, now: float, aging_seconds_per_level: float) -> tuple[float, ...]:
    return (
        -level(job, now, aging_seconds_per_level),
        job.vruntime,
        job.submit_time,
        job.id,
    )


def vruntime_increment(
    held: Resources, capacity: Resources, seconds: float, priority: str
) -> float:
    """What a job accrues for holding `held` for `seconds`: dominant share x time / weight,
    scaled so a normal-priority job holding the whole cluster accrues 1 per second."""
    share = max(
        (h / c for h, c in zip(held.as_tuple(), capacity.as_tuple(), strict=True) if c > 0),
        default=0.0,
    )
    return share * seconds * PRIORITY_WEIGHTS["normal"] / PRIORITY_WEIGHTS[priority]
