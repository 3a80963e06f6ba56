"""How much each team's jobs request and hold, measured against its quota.

Nothing here is stored: usage is derived from the active tasks (what jobs hold on nodes)
and the active jobs' specs (what they request), so it cannot drift from the truth.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from trainhub.tenancy.models import Quota
from trainhub.tenancy.resources import RESOURCE_NAMES, Resources

from .choices import JOB_ACTIVE, TASK_ACTIVE
from .jobspec import JobSpec
from .models import Job, Task
from .selectors import loads_by


def job_request(spec: JobSpec, workers: int | None = None) -> Resources:
    """What a job with this spec asks for: coordinator, every PS shard and `workers`
    workers (default: the spec's minimum)."""
    return spec.request(workers)


def requested_at(team_id: int, priority: str, *, exclude_job: int | None = None) -> Resources:
    """What the team's active jobs at `priority` request at their target size."""
    jobs = Job.objects.filter(team_id=team_id, priority=priority, state__in=JOB_ACTIVE)
    if exclude_job is not None:
        jobs = jobs.exclude(pk=exclude_job)
    total = Resources()
    for spec, target in jobs.values_list("spec", "target_workers"):
        total += job_request(JobSpec.from_dict(spec), target)
    return total


def held_by(team_ids: Iterable[int] | None = None) -> dict[int, dict[str, Resources]]:
    """What each team's active tasks hold on nodes, by priority."""
    tasks = Task.objects.filter(state__in=TASK_ACTIVE)
    if team_ids is not None:
        tasks = tasks.filter(job__team_id__in=list(team_ids))
    held: dict[int, dict[str, Resources]] = defaultdict(dict)
    for (team_id, priority), load in loads_by(tasks, "job__team_id", "job__priority").items():
        held[team_id][priority] = load.held
    return held


def requested_by(team_ids: Iterable[int]) -> dict[int, dict[str, Resources]]:
    """What each team's active jobs request at their target size, by priority."""
    requested: dict[int, dict[str, Resources]] = defaultdict(lambda: defaultdict(Resources))
    for team_id, priority, spec, target in (
        Job.objects.filter(team_id__in=list(team_ids), state__in=JOB_ACTIVE)
        .order_by()
        .values_list("team_id", "priority", "spec", "target_workers")
    ):
        requested[team_id][priority] += job_request(JobSpec.from_dict(spec), target)
    return requested


@dataclass(frozen=True)
class QuotaUsage:
    """A team's use of the cluster: within its quota, borrowed from others, lent to them."""

    used: Resources
    within_quota: Resources
    borrowed: Resources
    lent: Resources
    held_by_priority: dict[str, Resources] = field(default_factory=dict)
    # Empty when asked for without it (`quota_usage(..., requested=False)`).
    requested_by_priority: dict[str, Resources] = field(default_factory=dict)


def quota_usage(team_ids: Iterable[int], *, requested: bool = True) -> dict[int, QuotaUsage]:
    """Usage of these teams. Lending is shared out over every team's idle nominal quota
    (up to its lending limit) in proportion, so it needs the whole cluster's picture.

    `requested=False` leaves `requested_by_priority` empty: it reads and parses the spec of
    every active job of these teams, which a page that shows only what is held (the
    dashboard) does not need."""
    wanted = list(team_ids)
    quotas = {q.team_id: q for q in Quota.objects.all()}
    held = held_by()
    used = {t: sum(held.get(t, {}).values(), Resources()) for t in set(quotas) | set(held)}
    borrowed = {
        t: (used[t] - (quotas[t].nominal if t in quotas else Resources())).clamp_at_zero()
        for t in used
    }
    lendable: dict[int, Resources] = {}
    for t, quota in quotas.items():
        idle = (quota.nominal - used.get(t, Resources())).clamp_at_zero()
        limit = quota.lending_limit
        lendable[t] = Resources(
            *(
                min(getattr(idle, n), getattr(limit, n))
                if getattr(limit, n) is not None
                else getattr(idle, n)
                for n in RESOURCE_NAMES
            )
        )
    total_borrowed = sum(borrowed.values(), Resources())
    total_lendable = sum(lendable.values(), Resources())

    def lent_by(t: int) -> Resources:
        share = []
        for n in RESOURCE_NAMES:
            pool, out = getattr(total_lendable, n), getattr(total_borrowed, n)
            part = min(out, pool) * getattr(lendable.get(t, Resources()), n) / pool if pool else 0
            share.append(part)
        return Resources(share[0], round(share[1]), round(share[2]))

    asked = requested_by(wanted) if requested else {}

    result = {}
    for t in wanted:
        mine = used.get(t, Resources())
        result[t] = QuotaUsage(
            used=mine,
            within_quota=mine - borrowed.get(t, Resources()),
            borrowed=borrowed.get(t, Resources()),
            lent=lent_by(t),
            held_by_priority=dict(held.get(t, {})),
            requested_by_priority=dict(asked.get(t, {})),
        )
    return result
