"""The policy's input, read from the database: nodes, team quotas, jobs, reservations.

The policy (`scheduling.policy`) sees plain data with times in seconds since the epoch;
this module is the only place that turns models into that data.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q, TextField
from django.db.models.functions import MD5, Cast

from trainhub.jobs.choices import TASK_ACTIVE, DesiredState, JobState, TaskState
from trainhub.jobs.jobspec import JobSpec, ResourceSpec
from trainhub.jobs.models import Job, Task
from trainhub.nodes.choices import TEAMS_APART, NodeIsolation, NodeState
from trainhub.nodes.models import Node
from trainhub.tenancy.models import Quota

from . import policy
from .models import Reservation
from .vruntime import seen_vruntime

# Job states as the policy sees them. PREEMPTED: the job's tasks are still checkpointing
# and stopping; they hold their capacity but no longer count against the team's quota.
_POLICY_STATE = {
    JobState.PENDING: policy.PENDING,
    JobState.STARTING: policy.RUNNING,
    JobState.PREPARING: policy.RUNNING,
    JobState.RUNNING: policy.RUNNING,
    JobState.RESTARTING: policy.RUNNING,
    JobState.PREEMPTED: policy.STOPPING,
}


@dataclass(frozen=True)
class ClusterView:
    """A snapshot plus what applying decisions needs that the policy does not see."""

    snapshot: policy.Snapshot
    nodes: dict[int, Node]
    # Per node: ports held by active tasks or reported taken by the node; GPU indices held
    # by active tasks.
    used_ports: dict[int, set[int]]
    used_gpus: dict[int, set[int]]
    # The name of each active job, where the view has them at hand (`cache.py`); None:
    # the forecast asks the database.
    job_names: dict[int, str] | None = None
    _jobs: dict[int, Job] = field(default_factory=dict)

    def load_jobs(self, job_ids: list[int]) -> None:
        """Load the models of the jobs a cycle decided on in one query (`job` would load
        each alone)."""
        missing = [j for j in job_ids if j not in self._jobs]
        # Not the spec (a large document): applying decisions reads it for few jobs.
        for job in Job.objects.select_related("team").defer("spec").filter(pk__in=missing):
            self._jobs[job.pk] = job

    def job(self, job_id: int) -> Job:
        """The model of a job the policy decided on (loaded on first use: a cycle decides
        on few of the jobs it reads)."""
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = Job.objects.select_related("team").get(pk=job_id)
        return job


def ts(when: datetime | None) -> float | None:
    return None if when is None else when.timestamp()


def _limit(value: float | None) -> float:
    return math.inf if value is None else float(value)


def _resources(asked: ResourceSpec) -> policy.Resources:
    if asked.gpu_model is not None and asked.gpu > 0:
        return policy.ModelResources(
            float(asked.cpu), float(asked.memory_mb), float(asked.gpu), asked.gpu_model
        )
    return policy.Resources(float(asked.cpu), float(asked.memory_mb), float(asked.gpu))


def ports_in_use(node: Node) -> set[int]:
    """The TCP ports the node's last heartbeat reported listened on."""
    reported = (node.usage or {}).get("ports_in_use") or []
    return {p for p in reported if isinstance(p, int) and not isinstance(p, bool)}


def gpu_models(node: Node) -> dict[int, str]:
    """The model of each of a node's GPUs, by index."""
    return {int(g["index"]): str(g.get("model", "")) for g in node.gpus}


def _held(cpu: float, mem: float, gpus: list[int], models: dict[int, str]) -> policy.Resources:
    """What a placed task holds; GPUs all of one model are counted against that model."""
    if not gpus:
        return policy.Resources(cpu, mem, 0.0)
    held = {models.get(i) for i in gpus}
    if len(held) == 1 and None not in held:
        return policy.ModelResources(cpu, mem, float(len(gpus)), held.pop())
    return policy.Resources(cpu, mem, float(len(gpus)))


def policy_config() -> policy.PolicyConfig:
    return policy.PolicyConfig(
        aging_seconds_per_level=settings.SCHEDULER_AGING_SECONDS_PER_LEVEL,
        preemption_grace_seconds=settings.PREEMPTION_GRACE_SECONDS,
    )


def _node(node: Node, now: datetime) -> policy.Node:
    if not node.is_alive(now):
        state = policy.LOST
    elif node.state == NodeState.ACTIVE and node.isolation != NodeIsolation.UNAVAILABLE:
        state = policy.READY
    else:  # cordoned, draining, or its agent cannot sandbox: nothing new goes there
        state = policy.CORDONED
    return policy.Node(
        id=node.pk,
        capacity=policy.Resources(float(node.cpus), float(node.memory_mb), float(len(node.gpus))),
        state=state,
        owner=node.owner.slug if node.owner else None,
        gpu_models=dict(Counter(gpu_models(node).values())),
        isolated=node.isolation in TEAMS_APART,
    )


def _team(quota: Quota) -> policy.Team:
    return policy.Team(
        name=quota.team.slug,
        nominal=policy.Resources(float(quota.cpu), float(quota.memory_mb), float(quota.gpu)),
        borrowing_limit=policy.Resources(
            _limit(quota.borrowing_limit_cpu),
            _limit(quota.borrowing_limit_memory_mb),
            _limit(quota.borrowing_limit_gpu),
        ),
        lending_limit=policy.Resources(
            _limit(quota.lending_limit_cpu),
            _limit(quota.lending_limit_memory_mb),
            _limit(quota.lending_limit_gpu),
        ),
    )


_JOB_FIELDS = (
    "id",
    "team__slug",
    "priority",
    "state",
    "created_at",
    "spec_md5",
    "target_workers",
    "vruntime_seen",
    "last_rescale_at",
    "started_at",
    "pending_since",
    "preemptions",
    "reclaim_first",
)


@dataclass(frozen=True, slots=True)
class Asked:
    """What a job's spec asks of the policy (GPUs of a `gpu_model` as `ModelResources`)."""

    worker: policy.Resources
    workers_min: int
    workers_max: int
    ps_count: int
    ps: policy.Resources
    coordinator: policy.Resources
    freeze_seconds: float
    checkpoint_every_seconds: float
    ps_replication: int = 0


class _AskedCache:
    """Each job's `Asked`, parsed once per spec: a job's spec never changes after
    submission, and decoding 10,000 specs took a fifth of a cycle's snapshot read. The
    read fetches each spec's MD5 and only the specs not seen with that digest (a spec
    is a few hundred bytes to fetch, a digest 32). Holds the jobs of the latest read only
    (a Celery worker process runs cycle after cycle)."""

    BATCH = 500  # ids per query for the specs to fetch (SQLite's variable limit)

    def __init__(self) -> None:
        self._known: dict[int, tuple[str, Asked]] = {}

    def read(self, rows: list[dict[str, Any]]) -> dict[int, Asked]:
        known, fresh = self._known, {}
        missing = [
            row["id"]
            for row in rows
            if (hit := known.get(row["id"])) is None or hit[0] != row["spec_md5"]
        ]
        texts: dict[int, str] = {}
        for i in range(0, len(missing), self.BATCH):
            texts.update(
                Job.objects.filter(pk__in=missing[i : i + self.BATCH])
                .annotate(spec_text=Cast("spec", TextField()))
                .values_list("id", "spec_text")
            )
        for row in rows:
            job_id, digest = row["id"], row["spec_md5"]
            text = texts.get(job_id)
            if text is not None:
                fresh[job_id] = (digest, _parse_asked(text))
            elif job_id in known:
                fresh[job_id] = known[job_id]
            # else: deleted between the two queries; the read leaves it out
        self._known = fresh
        return {job_id: asked for job_id, (_, asked) in fresh.items()}


def asked_of(spec: JobSpec) -> Asked:
    """What `spec` asks of the policy; the one translation of a spec into policy terms (the
    cycle, the dry run and the what-if replay all use it)."""
    return Asked(
        worker=_resources(spec.workers.resources),
        workers_min=spec.workers.min,
        workers_max=spec.workers.max,
        ps_count=spec.parameter_servers.replicas,
        ps=_resources(spec.parameter_servers.resources),
        coordinator=_resources(spec.coordinator.resources),
        freeze_seconds=float(spec.freeze_seconds),
        checkpoint_every_seconds=float(spec.checkpoint_every_seconds),
        ps_replication=spec.parameter_servers.replication,
    )


def _parse_asked(text: str) -> Asked:
    return asked_of(JobSpec.from_dict(json.loads(text)))


_asked_cache = _AskedCache()


def _failed_at(job_ids: list[int]) -> dict[int, frozenset[int]]:
    """Per pending job, the nodes where its tasks' latest attempts failed: a job requeued
    after a failure at start (`jobs.services.reports`) is placed elsewhere first."""
    failed: dict[int, set[int]] = defaultdict(set)
    if not job_ids:
        return {}
    rows = Task.objects.filter(
        job__state=JobState.PENDING, state=TaskState.FAILED, node__isnull=False
    ).values_list("job_id", "node_id")
    wanted = set(job_ids)
    for job_id, node_id in rows:
        if job_id in wanted:
            failed[job_id].add(node_id)
    return {job_id: frozenset(nodes) for job_id, nodes in failed.items()}


def _job(
    job: dict[str, Any],
    spec: Asked,
    tasks: list[policy.Task],
    avoid: frozenset[int] = frozenset(),
) -> policy.Job:
    low, high = spec.workers_min, spec.workers_max
    last_rescale = ts(job["last_rescale_at"])
    running_workers = sum(1 for t in tasks if t.role == policy.WORKER and not t.stopping)
    target = job["target_workers"]
    if target is not None:
        # An owner's `scale` caps growth at the target and is carried out promptly: the
        # freeze window only restrains the scheduler's own resizing.
        high = target
        low = min(low, high)
        if running_workers < high:
            last_rescale = None
    return policy.Job(
        id=job["id"],
        team=job["team__slug"],
        priority=job["priority"],
        state=_POLICY_STATE.get(job["state"], policy.STOPPING),
        submit_time=job["created_at"].timestamp(),
        worker=spec.worker,
        workers_min=low,
        workers_max=high,
        ps_count=spec.ps_count,
        ps=spec.ps,
        coordinator=spec.coordinator,
        freeze_seconds=spec.freeze_seconds,
        tasks=tuple(tasks),
        vruntime=job["vruntime_seen"],
        last_rescale_time=last_rescale,
        started_at=ts(job["started_at"]),
        pending_since=ts(job["pending_since"]),
        # The policy estimates the last checkpoint from `started_at` (set at every start)
        # and this period: the work a preemption would lose.
        checkpoint_every_seconds=spec.checkpoint_every_seconds,
        preemptions=job["preemptions"],
        ps_replication=spec.ps_replication,
        avoid_nodes=avoid,
        reclaim_first=job["reclaim_first"],
    )


def read_cluster(now: datetime) -> ClusterView:
    """Everything one cycle decides on, read in a handful of queries."""
    nodes = {n.pk: n for n in Node.objects.select_related("owner")}
    teams = tuple(_team(q) for q in Quota.objects.select_related("team").order_by("team__slug"))
    tasks: dict[int, list[policy.Task]] = defaultdict(list)
    used_ports: dict[int, set[int]] = defaultdict(set)
    used_gpus: dict[int, set[int]] = defaultdict(set)
    models = {pk: gpu_models(n) for pk, n in nodes.items()}
    for pk, n in nodes.items():
        # Ports the node's agent saw taken (by anything: other services, another agent's
        # tasks on the same host); a task never gets one of them.
        used_ports[pk].update(ports_in_use(n))
    active = Task.objects.filter(state__in=TASK_ACTIVE, node__isnull=False).order_by(
        "job_id", "role", "index"
    )
    # GPU lists as text: most tasks hold none, and "[]" needs no JSON decoding.
    rows = active.annotate(gpus_text=Cast("gpu_indices", TextField())).values_list(
        "job_id",
        "role",
        "index",
        "node_id",
        "cpu",
        "memory_mb",
        "gpus_text",
        "port",
        "borrowed",
        "desired",
    )
    for job_id, role, index, node_id, cpu, mem, gpus_text, port, borrowed, desired in rows:
        gpus = json.loads(gpus_text) if gpus_text != "[]" else []
        used_gpus[node_id].update(gpus)
        if port is not None:
            used_ports[node_id].add(port)
        tasks[job_id].append(
            policy.Task(
                role=role,
                index=index,
                node_id=node_id,
                resources=_held(float(cpu), float(mem), gpus, models.get(node_id, {})),
                borrowed=borrowed,
                stopping=desired == DesiredState.STOP,
            )
        )
    # Jobs the policy decides on, and finished jobs whose tasks still hold their nodes.
    jobs = (
        Job.objects.filter(Q(state__in=list(_POLICY_STATE)) | Q(pk__in=active.values("job_id")))
        # A held job waits whatever the capacity: the policy does not see it.
        .exclude(state=JobState.PENDING, held=True)
        .order_by("id")
        .annotate(spec_md5=MD5(Cast("spec", TextField())), vruntime_seen=seen_vruntime())
        .values(*_JOB_FIELDS)
    )
    job_rows = list(jobs)
    asked = _asked_cache.read(job_rows)
    avoid = _failed_at([j["id"] for j in job_rows if j["state"] == JobState.PENDING])
    reservations = tuple(
        policy.Reservation(
            job_id=r.job_id,
            node_id=r.node_id,
            resources=policy.ModelResources(r.cpu, r.memory_mb, r.gpu, r.gpu_model)
            if r.gpu_model and r.gpu > 0
            else policy.Resources(r.cpu, r.memory_mb, r.gpu),
            created_at=r.created_at.timestamp(),
        )
        for r in Reservation.objects.order_by("job_id", "node_id")
    )
    snapshot = policy.Snapshot(
        now=now.timestamp(),
        nodes=tuple(_node(nodes[k], now) for k in sorted(nodes)),
        teams=teams,
        jobs=tuple(
            _job(j, asked[j["id"]], tasks[j["id"]], avoid.get(j["id"], frozenset()))
            for j in job_rows
            if j["id"] in asked
        ),
        reservations=reservations,
        config=policy_config(),
    )
    return ClusterView(snapshot, nodes, used_ports, used_gpus)
