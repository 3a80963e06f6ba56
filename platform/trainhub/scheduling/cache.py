"""The scheduler's view of the cluster kept in memory, as Kubernetes' scheduler and Kueue
keep theirs: each process that answers dry runs or runs cycles holds the rows the
snapshot is built from (`snapshot.read_cluster` reads them all, every time).

Every use starts with one query: the fingerprint of each row set (`rowsets.py`) as the
database holds it, compared with the one computed from the rows held. Row sets that match
are used as they are; one that differs reads again first the groups the domain events
named since (`on_event`: a job submitted, a task ended, a node cordoned, a quota
changed), then, if it still differs (an event lost, a write by another process or by a
cycle elsewhere), the ids and versions of its rows and only the rows that changed. So a
dry run on a quiet cluster reads one row of numbers, and the cycle that applies
placements always decides on what the database holds. Not on SQLite (standalone): there
`read_cluster` reads everything each time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db import connection

from trainhub.events import (
    Event,
    JobPendingReasonChanged,
    JobScaled,
    JobStateChanged,
    JobSubmitted,
    NodeChanged,
    QuotaChanged,
    RestartsWaiting,
    TaskStateChanged,
)
from trainhub.jobs.choices import JOB_ACTIVE
from trainhub.nodes.models import Node

from . import policy
from .clusterrows import TaskRow, cluster_rows
from .rowsets import database_fingerprints
from .snapshot import (
    ClusterView,
    _held,
    _job,
    _node,
    gpu_models,
    policy_config,
    ports_in_use,
    read_cluster,
)


# Which row sets an event names the rows of, and by what (the row set's group).
def _groups(event: Event) -> list[tuple[str, Any]]:
    if isinstance(event, JobSubmitted | JobScaled | JobPendingReasonChanged):
        return [("jobs", event.job_id)]
    if isinstance(event, JobStateChanged | RestartsWaiting | TaskStateChanged):
        job = event.job_id
        return [("jobs", job), ("tasks", job), ("failures", job), ("reservations", job)]
    if isinstance(event, NodeChanged):
        return [("nodes", event.node_id)]
    if isinstance(event, QuotaChanged):
        return [("quotas", event.team_id)]
    return []


class ClusterCache:
    """The rows the scheduler's snapshot is built from, and the snapshot parts built from
    them, kept between uses; `view(now)` brings them up to date first. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        rows = cluster_rows()
        self.nodes, self.quotas, self.jobs = rows.nodes, rows.quotas, rows.jobs
        self.tasks, self.failures, self.reservations = rows.tasks, rows.failures, rows.reservations
        self.accruals = rows.accruals
        self._sets = rows.all()
        self._hints: dict[str, set[Any]] = {s.name: set() for s in self._sets}
        # Built from the rows: policy nodes by id (with the row and liveness they were built
        # from), policy jobs by id, the active jobs' names, and the snapshot's last tuples.
        self._policy_nodes: dict[int, tuple[Node, bool, policy.Node]] = {}
        self._gpu_models: dict[int, dict[int, str]] = {}
        self._policy_jobs: dict[int, policy.Job] = {}
        # A job's tasks as the policy sees them: kept when only the job's row changed (each
        # cycle rewrites every running job's virtual runtime, rarely its tasks).
        self._policy_tasks: dict[int, tuple[policy.Task, ...]] = {}
        self._jobs_tuple: tuple[policy.Job, ...] = ()
        self._names: dict[int, str] = {}
        self._teams: tuple[policy.Team, ...] = ()
        self._reservations: tuple[policy.Reservation, ...] = ()
        self._used: tuple[dict[int, set[int]], dict[int, set[int]]] = ({}, {})

    def note(self, event: Event) -> None:
        """Remember which rows `event` says changed, to read them first next time."""
        groups = _groups(event)
        if groups:
            with self._lock:
                for name, key in groups:
                    self._hints[name].add(key)

    def sync(self) -> None:
        """Bring every row set up to what the database holds (the version check, then
        only what changed)."""
        with self._lock:
            self._sync()

    def _sync(self) -> None:
        wanted, wrote = database_fingerprints(self._sets)
        for rows, fingerprint in zip(self._sets, wanted, strict=True):
            rows.provisional = wrote
            hints = self._hints[rows.name]
            self._hints[rows.name] = set()
            if rows.fingerprint() == fingerprint:
                continue
            if hints and rows.rows:
                rows.reload_groups(hints)
                if rows.fingerprint() == fingerprint:
                    continue
            rows.resync()

    def view(self, now: datetime) -> ClusterView:
        """The cluster as `read_cluster(now)` would read it."""
        with self._lock:
            self._sync()
            return self._assemble(now)

    def _assemble(self, now: datetime) -> ClusterView:
        nodes_changed = bool(self.nodes.changed_groups)
        self.nodes.changed_groups.clear()
        nodes = dict(sorted((pk, row[2]) for pk, row in self.nodes.rows.items()))
        dirty_jobs = self.jobs.changed_groups | self.tasks.changed_groups
        dirty_jobs |= self.failures.changed_groups | self.accruals.changed_groups
        tasks_changed = bool(self.tasks.changed_groups)
        for job_id in self.tasks.changed_groups:
            self._policy_tasks.pop(job_id, None)
        if nodes_changed:
            models = {pk: gpu_models(n) for pk, n in nodes.items()}
            if models != self._gpu_models:  # what tasks hold is counted by GPU model
                self._gpu_models = models
                dirty_jobs |= set(self._policy_jobs) | set(self.jobs.rows)
                self._policy_tasks.clear()
            for gone in self._policy_nodes.keys() - nodes.keys():
                del self._policy_nodes[gone]
        if self.jobs.changed_groups:
            self._names = {
                pk: row.fields["name"]
                for pk, (_, _, row) in self.jobs.rows.items()
                if row.fields["state"] in JOB_ACTIVE
            }
        for s in (self.jobs, self.tasks, self.failures, self.accruals):
            s.changed_groups.clear()
        if dirty_jobs:
            self._rebuild_jobs(dirty_jobs)
        if self.quotas.changed_groups:
            self.quotas.changed_groups.clear()
            self._teams = tuple(sorted(self.quotas.items(), key=lambda t: t.name))
        if self.reservations.changed_groups:
            self.reservations.changed_groups.clear()
            self._reservations = tuple(
                sorted(self.reservations.items(), key=lambda r: (r.job_id, r.node_id))
            )
        if nodes_changed or tasks_changed:
            self._used = self._used_by_tasks(nodes)
        snapshot = policy.Snapshot(
            now=now.timestamp(),
            nodes=tuple(self._policy_node(n, now) for n in nodes.values()),
            teams=self._teams,
            jobs=self._jobs_tuple,
            reservations=self._reservations,
            config=policy_config(),
        )
        ports, gpus = self._used
        return ClusterView(
            snapshot,
            nodes,
            # Copies: applying decisions adds the ports and GPUs it hands out.
            defaultdict(set, {k: set(v) for k, v in ports.items()}),
            defaultdict(set, {k: set(v) for k, v in gpus.items()}),
            job_names=self._names,  # read-only: `preview._forecast` copies it
        )

    def _policy_node(self, node: Node, now: datetime) -> policy.Node:
        alive = node.is_alive(now)
        built = self._policy_nodes.get(node.pk)
        if built is None or built[0] is not node or built[1] != alive:
            built = self._policy_nodes[node.pk] = (node, alive, _node(node, now))
        return built[2]

    def _rebuild_jobs(self, dirty: set[int]) -> None:
        for pk in dirty:
            held = self.jobs.rows.get(pk)
            if held is None:
                self._policy_jobs.pop(pk, None)
                self._policy_tasks.pop(pk, None)
                continue
            row = held[2]
            tasks = self._policy_tasks.get(pk)
            if tasks is None:
                rows = sorted(self.tasks.group(pk), key=lambda t: (t.role, t.index))
                tasks = self._policy_tasks[pk] = tuple(self._policy_task(t) for t in rows)
            avoid = frozenset(self.failures.group(pk))
            fields = row.fields
            accrued = self.accruals.rows.get(pk)
            if accrued is not None:  # a pending job's: as `vruntime.seen_vruntime` adds it
                fields = {**fields, "vruntime_seen": fields["vruntime_seen"] + accrued[2]}
            self._policy_jobs[pk] = _job(fields, row.asked, list(tasks), avoid)
        self._jobs_tuple = tuple(self._policy_jobs[pk] for pk in sorted(self._policy_jobs))

    def _policy_task(self, t: TaskRow) -> policy.Task:
        return policy.Task(
            role=t.role,
            index=t.index,
            node_id=t.node_id,
            resources=_held(t.cpu, t.memory_mb, list(t.gpus), self._gpu_models.get(t.node_id, {})),
            borrowed=t.borrowed,
            stopping=t.stopping,
        )

    def _used_by_tasks(
        self, nodes: dict[int, Node]
    ) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
        ports: dict[int, set[int]] = {pk: ports_in_use(n) for pk, n in nodes.items()}
        gpus: dict[int, set[int]] = {}
        for t in self.tasks.items():
            gpus.setdefault(t.node_id, set()).update(t.gpus)
            if t.port is not None:
                ports.setdefault(t.node_id, set()).add(t.port)
        return ports, gpus


_cache = ClusterCache()


def cluster_view(now: datetime) -> ClusterView:
    """The cluster as the scheduler sees it at `now`: from this process's cache, brought
    up to date by one version check (PostgreSQL), else read whole (`read_cluster`)."""
    if connection.vendor != "postgresql":
        return read_cluster(now)
    return _cache.view(now)


def on_event(event: Event) -> None:
    """Note the rows a domain event says changed (called by `triggers.on_event`)."""
    _cache.note(event)
