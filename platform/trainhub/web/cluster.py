"""What the dashboard and the node pages show about the cluster, shaped for templates.

Read side only: nodes and their load come from `trainhub.nodes`/`trainhub.jobs` selectors,
team usage from `trainhub.jobs.usage.quota_usage`. Every figure is computed in a fixed
number of queries whatever the number of nodes, teams or jobs (the view tests pin them).
Numbers are always written out in text beside their bars: colour is never the only cue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ps_runtime.version import known_runtime_version
from trainhub.jobs.models import Task
from trainhub.jobs.selectors import NodeLoad, node_loads
from trainhub.jobs.usage import QuotaUsage
from trainhub.nodes.models import Node
from trainhub.nodes.selectors import NodeStatus, agent_outdated, agent_version, node_status
from trainhub.tenancy.models import Team
from trainhub.tenancy.resources import RESOURCE_NAMES, Resources

LABELS = {"cpu": "CPU", "memory_mb": "Memory", "gpu": "GPU"}
NO_LOAD = NodeLoad(Resources(), 0)


def amount(resource: str, value: float, like: float | None = None) -> str:
    """`1.5 CPU`, `16 GiB`, `512 MiB`, `2 GPU` (rounded for reading, not for arithmetic).

    Memory is in GiB from 1 GiB on, else MiB; `like` picks the unit by another value
    instead, so a part reads in its whole's unit ("0.5 of 32 GiB", not "512 MiB of 32 GiB").
    """
    if resource == "memory_mb":
        if abs(value if like is None else like) >= 1024:
            return f"{round(value / 1024, 1):g} GiB"
        return f"{round(value):g} MiB"
    if resource == "gpu":
        return f"{round(value):g} GPU"
    return f"{round(value, 2):g} CPU"


def _width(part: float, whole: float) -> str:
    """A CSS width: `part` as a percentage of `whole` (0 when there is no whole)."""
    if whole <= 0:
        return "0%"
    return f"{max(0.0, min(100.0, 100 * part / whole)):.1f}%"


@dataclass(frozen=True)
class Allocation:
    """One resource of a node or the cluster: allocated to tasks, out of a capacity."""

    resource: str
    label: str
    allocated: str
    capacity: str
    percent: int
    width: str
    has_capacity: bool

    @property
    def text(self) -> str:
        if not self.has_capacity:
            return "no capacity"
        return f"{self.allocated} of {self.capacity} allocated ({self.percent}%)"


def allocations(held: Resources, capacity: Resources) -> list[Allocation]:
    result = []
    for name in RESOURCE_NAMES:
        used, total = getattr(held, name), getattr(capacity, name)
        result.append(
            Allocation(
                resource=name,
                label=LABELS[name],
                allocated=amount(name, used, like=total),
                capacity=amount(name, total),
                percent=round(100 * used / total) if total > 0 else 0,
                width=_width(used, total),
                has_capacity=total > 0,
            )
        )
    return result


@dataclass(frozen=True)
class QuotaBar:
    """A team's use of one resource against its nominal quota. The bar's scale is the
    quota plus what the team borrows beyond it; `idle_width` is the unused rest of the
    quota, so borrowing shows past the quota's end."""

    resource: str
    label: str
    nominal: str
    used: str
    borrowed: str
    lent: str
    used_width: str
    lent_width: str
    idle_width: str
    borrowed_width: str
    has_borrowed: bool
    has_lent: bool

    @property
    def text(self) -> str:
        return (
            f"{self.used} used of {self.nominal} quota · {self.borrowed} borrowed"
            f" · {self.lent} lent"
        )


def quota_bars(
    nominal: Resources, usage: QuotaUsage, resources: Sequence[str] = RESOURCE_NAMES
) -> list[QuotaBar]:
    bars = []
    for name in resources:
        quota = getattr(nominal, name)
        within = max(0.0, getattr(usage.within_quota, name))
        borrowed = getattr(usage.borrowed, name)
        lent = getattr(usage.lent, name)
        scale = quota + borrowed
        bars.append(
            QuotaBar(
                resource=name,
                label=LABELS[name],
                nominal=amount(name, quota),
                used=amount(name, getattr(usage.used, name), like=quota),
                borrowed=amount(name, borrowed),
                lent=amount(name, lent),
                used_width=_width(within, scale),
                lent_width=_width(lent, scale),
                idle_width=_width(max(0.0, quota - within - lent), scale),
                borrowed_width=_width(borrowed, scale),
                has_borrowed=borrowed > 0,
                has_lent=lent > 0,
            )
        )
    return bars


@dataclass(frozen=True)
class TeamUsage:
    team: Team
    bars: list[QuotaBar]


def team_usage(
    teams: Sequence[Team], usage: dict[int, QuotaUsage], *, gpus_in_cluster: bool
) -> list[TeamUsage]:
    """Quota bars for each team (`teams` with `quota` selected; a team without a quota row
    has a nominal quota of zero). GPUs only when the cluster or a team has any."""
    nominals = {}
    for team in teams:
        quota = getattr(team, "quota", None)
        nominals[team.pk] = quota.nominal if quota is not None else Resources()
    gpus = gpus_in_cluster or any(nominals[t.pk].gpu > 0 or usage[t.pk].used.gpu > 0 for t in teams)
    shown = RESOURCE_NAMES if gpus else tuple(n for n in RESOURCE_NAMES if n != "gpu")
    return [TeamUsage(t, quota_bars(nominals[t.pk], usage[t.pk], shown)) for t in teams]


@dataclass(frozen=True)
class NodeRow:
    """A node as the node pages show it."""

    node: Node
    status: NodeStatus
    drained: bool  # draining and nothing runs there any more: safe to take out
    version: str | None
    outdated: bool  # the agent runs another version than this server
    server_version: str | None
    load: NodeLoad
    allocations: list[Allocation]
    is_new: bool  # joined after the moment the page was asked about (`since`)


def node_rows(
    nodes: Iterable[Node], now: datetime, *, since: datetime | None = None
) -> list[NodeRow]:
    """Rows for these nodes, their loads read in one query."""
    nodes = list(nodes)
    loads = node_loads(n.pk for n in nodes)
    server_version = known_runtime_version()
    rows = []
    for node in nodes:
        load = loads.get(node.pk, NO_LOAD)
        status = node_status(node, now)
        rows.append(
            NodeRow(
                node=node,
                status=status,
                drained=status == NodeStatus.DRAINING and load.tasks == 0,
                version=agent_version(node),
                outdated=agent_outdated(node, server_version),
                server_version=server_version,
                load=load,
                allocations=allocations(load.held, node_capacity(node)),
                is_new=since is not None and node.enrolled_at > since,
            )
        )
    return rows


def node_capacity(node: Node) -> Resources:
    return Resources(node.cpus, node.memory_mb, node.gpu_count)


@dataclass(frozen=True)
class ClusterSummary:
    """Capacity of the ready nodes against what active tasks hold on them."""

    allocations: list[Allocation]
    by_status: dict[str, int]  # every NodeStatus, in order, with its count
    nodes: int
    gpus: int  # GPUs on all nodes, ready or not
    capacity: Resources  # of the ready nodes


def cluster_summary(nodes: Iterable[Node], now: datetime) -> ClusterSummary:
    nodes = list(nodes)
    loads = node_loads()
    capacity, held = Resources(), Resources()
    counts: Counter[NodeStatus] = Counter()
    gpus = 0
    for node in nodes:
        gpus += node.gpu_count
        status = node_status(node, now)
        counts[status] += 1
        if status == NodeStatus.READY:
            capacity += node_capacity(node)
            held += loads.get(node.pk, NO_LOAD).held
    return ClusterSummary(
        allocations=allocations(held, capacity),
        by_status={s.value: counts[s] for s in NodeStatus},
        nodes=len(nodes),
        gpus=gpus,
        capacity=capacity,
    )


@dataclass(frozen=True)
class Unassigned:
    """One resource of the ready nodes' capacity that no team's quota covers (`amount`),
    or, when the quotas add up to more than the capacity, by how much (`over`)."""

    resource: str
    label: str
    amount: str
    over: str | None


def unassigned_capacity(capacity: Resources, quotas: Resources) -> list[Unassigned]:
    """Capacity minus the sum of every team's nominal quota, per resource."""
    rows = []
    for name in RESOURCE_NAMES:
        rest = getattr(capacity, name) - getattr(quotas, name)
        rows.append(
            Unassigned(
                resource=name,
                label=LABELS[name],
                amount=amount(name, max(0, rest)),
                over=amount(name, -rest) if rest < 0 else None,
            )
        )
    return rows


@dataclass(frozen=True)
class TaskRow:
    """A task on a node page; a job of a team the reader is not in shows no name or link."""

    task: Task
    visible: bool

    @property
    def slot(self) -> str:
        return f"{self.task.role}-{self.task.index}"


@dataclass(frozen=True)
class GpuRow:
    index: int
    model: str
    memory: str
    task: TaskRow | None


def task_rows(tasks: Iterable[Task], visible_teams: set[int] | None) -> list[TaskRow]:
    """`visible_teams`: the reader's team ids, None for a platform admin (sees all)."""
    return [TaskRow(t, visible_teams is None or t.job.team_id in visible_teams) for t in tasks]


def gpu_rows(node: Node, tasks: Iterable[TaskRow]) -> list[GpuRow]:
    """The node's GPUs as its agent reported them, each with the task holding it."""
    holder = {index: row for row in tasks for index in (row.task.gpu_indices or [])}
    rows = []
    for gpu in sorted(node.gpus or [], key=lambda g: int(g.get("index", 0))):
        index = int(gpu.get("index", 0))
        memory = gpu.get("memory_mb")
        rows.append(
            GpuRow(
                index=index,
                model=str(gpu.get("model") or "unknown"),
                memory=amount("memory_mb", memory) if memory else "unknown",
                task=holder.get(index),
            )
        )
    return rows
