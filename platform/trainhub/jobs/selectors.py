"""Read-side queries about jobs, including what each node should be running."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, Func, IntegerField, Q, QuerySet, Sum
from django.utils import timezone

from ps_runtime.agent.protocol import (
    DEFAULT_STOP_GRACE_SECONDS,
    DesiredTask,
    DesiredTasks,
    JobEnvironment,
    TaskTLS,
)
from ps_runtime.taskenv import ClusterSpec, Role, TaskEnvironment
from trainhub.nodes.models import Node
from trainhub.tenancy.resources import Resources

from .choices import JOB_PLACED, JOB_TERMINAL, TASK_ACTIVE, DesiredState, JobState, TaskRole
from .jobspec import EnvironmentSpec
from .models import Job, JobEvent, Task

# A preempted job's PS shards and workers keep serving while its coordinator checkpoints.
JOB_SERVING = JOB_PLACED | {JobState.PREEMPTED}


def desired_tasks(node: Node) -> DesiredTasks:
    """The tasks that should be running on `node`: the agent protocol's document."""
    mine = list(
        Task.objects.filter(
            node=node,
            desired=DesiredState.RUN,
            state__in=TASK_ACTIVE,
            job__state__in=JOB_SERVING,
        )
        # A restart waiting out its backoff (`services.restarts`) is not started yet.
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=timezone.now()))
        .select_related("job", "node")
    )
    job_ids = {t.job_id for t in mine}
    clusters = _clusters(job_ids)
    # Imported here: the services package imports the usage module, which reads loads
    # from this one (a module-level import would make the two a cycle).
    from .services.tls import node_material

    # TLS material goes only to the node that runs the task, for that node's address.
    tls = node_material(job_ids, node.address, timezone.now()) if mine else {}
    # Tasks still running here of jobs that ended: they stop without a checkpoint grace.
    ended = Task.objects.filter(node=node, state__in=TASK_ACTIVE, job__state__in=JOB_TERMINAL)
    return DesiredTasks(
        node_id=node.pk,
        stop_grace_seconds=DEFAULT_STOP_GRACE_SECONDS,
        ended_jobs=frozenset(ended.values_list("job_id", flat=True)),
        tasks=tuple(
            _desired_task(t, clusters.get(t.job_id, ClusterSpec()), tls.get(t.job_id)) for t in mine
        ),
    )


def _clusters(job_ids: set[int]) -> dict[int, ClusterSpec]:
    """Each job's PS and worker addresses in index order, as the runtime expects them."""
    peers: dict[int, dict[str, list[str]]] = defaultdict(lambda: {"ps": [], "worker": []})
    for peer in (
        Task.objects.filter(
            job_id__in=job_ids,
            role__in=[TaskRole.PS, TaskRole.WORKER],
            desired=DesiredState.RUN,
            state__in=TASK_ACTIVE,
        )
        .select_related("node")
        .order_by("job_id", "role", "index")
    ):
        if peer.address:
            peers[peer.job_id][peer.role].append(peer.address)
    return {
        job_id: ClusterSpec(ps=tuple(roles["ps"]), worker=tuple(roles["worker"]))
        for job_id, roles in peers.items()
    }


def _task_environment(task: Task, cluster: ClusterSpec) -> TaskEnvironment:
    """What the task process is told (docs/protocol.md §2)."""
    job: Job = task.job
    # Only a coordinator runs the job's code, so only it needs the spec.
    spec = job.job_spec if task.role == TaskRole.COORDINATOR else None
    bind = None
    if task.port is not None and task.node is not None:
        bind = f"{task.node.address}:{task.port}"
    replication = job.job_spec.parameter_servers.replication
    if replication:
        cluster = dataclasses.replace(cluster, replication=replication)
    return TaskEnvironment(
        role=Role(task.role),
        job_token=job.runtime_token,
        job_id=str(job.pk),
        task_id=str(task.pk),
        index=task.index,
        cluster=cluster,
        bind=bind,
        checkpoint_dir=job.checkpoint_dir,
        entrypoint=spec.entrypoint if spec else None,
        args=dict(spec.args) if spec else {},
        checkpoint_every_seconds=float(spec.checkpoint_every_seconds) if spec else None,
        # Workers import the functions the coordinator schedules: they need the code too.
        code=job.job_spec.code if task.role != TaskRole.PS else None,
        # A PS relaunched alone copies its shards from a live replica.
        ps_rejoin=task.rejoin,
    )


def _desired_task(task: Task, cluster: ClusterSpec, tls: TaskTLS | None) -> DesiredTask:
    return DesiredTask(
        id=task.pk,
        attempt=task.attempt,
        job_id=task.job_id,
        role=Role(task.role),
        index=task.index,
        cpu=task.cpu,
        memory_mb=task.memory_mb,
        gpu_indices=tuple(task.gpu_indices or ()),
        env=_task_environment(task, cluster).to_env(),
        # A coordinator gets time to save a checkpoint when stopped (preemption).
        stop_grace_seconds=(
            settings.PREEMPTION_GRACE_SECONDS if task.role == TaskRole.COORDINATOR else None
        ),
        tls=tls,
        environment=_job_environment(task.job.job_spec.environment),
    )


def _job_environment(spec: EnvironmentSpec | None) -> JobEnvironment | None:
    if spec is None:
        return None
    return JobEnvironment(spec.requirements, spec.python, float(spec.timeout_seconds))


# What the dashboard and the node pages read (one query each, whatever the cluster's size).


class JSONArrayLength(Func):
    """The length of a JSON array column, in SQL (PostgreSQL's jsonb, SQLite's JSON1)."""

    function = "JSON_ARRAY_LENGTH"
    output_field = IntegerField()

    def as_postgresql(
        self, compiler: Any, connection: Any, **extra_context: Any
    ) -> tuple[str, Any]:
        return self.as_sql(compiler, connection, function="JSONB_ARRAY_LENGTH", **extra_context)


@dataclass(frozen=True)
class NodeLoad:
    """What some active tasks (those on one node, of one team...) hold, and how many."""

    held: Resources
    tasks: int


def loads_by(tasks: QuerySet[Task], *keys: str) -> dict[tuple[Any, ...], NodeLoad]:
    """What `tasks` hold, summed by the database for each value of `keys` (fields or
    lookups such as `job__team_id`): one row per group, so the cost does not grow with
    the number of tasks on the Python side."""
    rows = (
        tasks.order_by()
        .values_list(*keys)
        .annotate(
            cpu_held=Sum("cpu"),
            memory_held=Sum("memory_mb"),
            gpus_held=Sum(JSONArrayLength("gpu_indices")),
            tasks_held=Count("id"),
        )
    )
    n = len(keys)
    return {
        tuple(row[:n]): NodeLoad(
            Resources(float(row[n] or 0), int(row[n + 1] or 0), int(row[n + 2] or 0)), row[n + 3]
        )
        for row in rows
    }


def node_loads(node_ids: Iterable[int] | None = None) -> dict[int, NodeLoad]:
    """Each node's load by its active tasks (nodes running nothing are absent)."""
    tasks = Task.objects.filter(state__in=TASK_ACTIVE, node__isnull=False)
    if node_ids is not None:
        tasks = tasks.filter(node_id__in=list(node_ids))
    return {node_id: load for (node_id,), load in loads_by(tasks, "node_id").items()}


@dataclass(frozen=True)
class PendingSummary:
    count: int
    # The most common reasons, most frequent first: (reason, jobs); "" is "not yet
    # looked at by the scheduler".
    reasons: list[tuple[str, int]]
    # Pending jobs in the whole cluster, every team's: the queue a new job's place (the
    # submit page's Check, the job page) is counted in. Equal to `count` when not scoped.
    in_cluster: int = 0
    # Whether `count` is some teams' jobs only (a member's), not the whole cluster's.
    scoped: bool = False

    @property
    def of_other_teams(self) -> int:
        """Pending jobs outside the summary's teams: a number only, never their names."""
        return self.in_cluster - self.count


def pending_summary(jobs: QuerySet[Job], top: int = 5) -> PendingSummary:
    """How many of `jobs` (a Job queryset) wait, their `top` most common reasons, and
    how many jobs wait in the whole cluster. A member sees only their teams' jobs while a
    new job's place in the queue counts every team's, so both numbers are given (in one
    query: the cluster's count and the visible one are aggregated together)."""
    pending = jobs.filter(state=JobState.PENDING)
    grouped = (
        pending.order_by()
        .values("pending_reason")
        .annotate(n=Count("id"))
        .order_by("-n", "pending_reason")[:top]
    )
    reasons = [(g["pending_reason"], g["n"]) for g in grouped]
    if not jobs.query.has_filters():  # everyone's jobs (a platform admin's)
        count = pending.count()
        return PendingSummary(count=count, reasons=reasons, in_cluster=count)
    counts = Job.objects.filter(state=JobState.PENDING).aggregate(
        in_cluster=Count("id"),
        count=Count("id", filter=Q(pk__in=pending.order_by().values("pk"))),
    )
    return PendingSummary(
        count=counts["count"], reasons=reasons, in_cluster=counts["in_cluster"], scoped=True
    )


_EVENT_FIELDS = ("id", "job", "time", "kind", "from_state", "to_state", "reason", "actor")


def recent_events(jobs: QuerySet[Job], limit: int = 15) -> list[JobEvent]:
    """The latest `limit` events of `jobs` (a Job queryset), newest first, with their job."""
    events = JobEvent.objects.all()
    if jobs.query.has_filters():  # everyone's jobs (a platform admin's) need no semi-join
        events = events.filter(job__in=jobs.order_by().values("pk"))
    return list(
        events.select_related("job")
        .only(*_EVENT_FIELDS, "job__name", "job__team_id")
        .order_by("-time", "-id")[:limit]
    )


_TASK_FIELDS = (
    "id",
    "job",
    "role",
    "index",
    "attempt",
    "state",
    "node",
    "cpu",
    "memory_mb",
    "gpu_indices",
    "borrowed",
    "started_at",
)


def tasks_on_node(node: Node) -> list[Task]:
    """The active tasks on `node`, with their job and its team, in job then slot order."""
    return list(
        Task.objects.filter(node=node, state__in=TASK_ACTIVE)
        .select_related("job__team")
        .only(*_TASK_FIELDS, "job__name", "job__state", "job__team__slug")
        .order_by("job_id", "role", "index")
    )
