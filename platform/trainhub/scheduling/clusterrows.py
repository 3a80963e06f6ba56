"""The rows the scheduler's snapshot is built from, as row sets (`rowsets.py`) that
`cache.py` keeps: the same filters as `snapshot.read_cluster`, each row with its version."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import F, Q, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import MD5, Cast

from trainhub.jobs.choices import TASK_ACTIVE, DesiredState, JobState, TaskState
from trainhub.jobs.models import Job, Task
from trainhub.nodes.models import Node
from trainhub.tenancy.models import Quota, Team

from . import policy
from .models import Reservation, VruntimeAccrual
from .rowsets import RowSet, row_version
from .snapshot import _JOB_FIELDS, _POLICY_STATE, Asked, _parse_asked, _team


@dataclass(frozen=True, slots=True)
class JobRow:
    fields: dict[str, Any]
    spec_md5: str
    asked: Asked


@dataclass(frozen=True, slots=True)
class TaskRow:
    role: str
    index: int
    node_id: int
    cpu: float
    memory_mb: float
    gpus: tuple[int, ...]
    port: int | None
    borrowed: bool
    stopping: bool


def _nodes() -> QuerySet[Any]:
    return Node.objects.select_related("owner").annotate(rv=row_version(Node._meta.db_table))


def _load_nodes(qs: QuerySet[Any], held: dict[int, Node]) -> Any:
    return ((n.pk, n.rv, n.pk, n) for n in qs)


def _quotas() -> QuerySet[Any]:
    quota, team = Quota._meta.db_table, Team._meta.db_table
    q = connection.ops.quote_name
    # A team's slug names it in the snapshot: the team's row counts as part of the quota's.
    version = RawSQL(
        f"{q(quota)}.xmin::text::bigint + (SELECT t.xmin::text::bigint FROM {q(team)} t"
        f" WHERE t.id = {q(quota)}.team_id)",
        (),
    )
    return Quota.objects.select_related("team").annotate(rv=version)


def _load_quotas(qs: QuerySet[Any], held: dict[int, policy.Team]) -> Any:
    return ((q.pk, q.rv, q.team_id, _team(q)) for q in qs)


def _active_tasks() -> QuerySet[Any]:
    return Task.objects.filter(state__in=TASK_ACTIVE, node__isnull=False)


def _jobs() -> QuerySet[Any]:
    return (
        Job.objects.filter(
            Q(state__in=list(_POLICY_STATE)) | Q(pk__in=_active_tasks().values("job_id"))
        )
        .exclude(state=JobState.PENDING, held=True)
        # What a pending job accrued while running is the `accruals` set's, added by the cache.
        .annotate(rv=row_version(Job._meta.db_table), vruntime_seen=F("vruntime"))
    )


def _load_jobs(qs: QuerySet[Any], held: dict[int, JobRow]) -> Any:
    rows = list(
        qs.annotate(spec_md5=MD5(Cast("spec", TextField()))).values(*_JOB_FIELDS, "name", "rv")
    )
    unknown = [
        r["id"] for r in rows if (h := held.get(r["id"])) is None or h.spec_md5 != r["spec_md5"]
    ]
    texts: dict[int, str] = {}
    if unknown:
        texts = dict(
            Job.objects.filter(pk__in=unknown)
            .annotate(spec_text=Cast("spec", TextField()))
            .values_list("id", "spec_text")
        )
    for r in rows:
        pk = r["id"]
        if pk in texts:
            asked = _parse_asked(texts[pk])
        elif pk in held and held[pk].spec_md5 == r["spec_md5"]:
            asked = held[pk].asked
        else:
            continue  # deleted between the two queries; the next check reads it again
        yield pk, r["rv"], pk, JobRow(r, r["spec_md5"], asked)


def _tasks() -> QuerySet[Any]:
    return _active_tasks().annotate(rv=row_version(Task._meta.db_table))


def _load_tasks(qs: QuerySet[Any], held: dict[int, TaskRow]) -> Any:
    rows = qs.annotate(gpus_text=Cast("gpu_indices", TextField())).values_list(
        "id", "rv", "job_id", "role", "index", "node_id", "cpu", "memory_mb", "gpus_text",
        "port", "borrowed", "desired",
    )  # fmt: skip
    for pk, rv, job_id, role, index, node, cpu, mem, gpus, port, borrowed, desired in rows:
        parsed = tuple(_json_ints(gpus))
        row = TaskRow(
            role, index, node, float(cpu), float(mem), parsed, port, borrowed,
            desired == DesiredState.STOP,
        )  # fmt: skip
        yield pk, rv, job_id, row


def _json_ints(text: str) -> list[int]:
    # GPU lists as text: most tasks hold none, and "[]" needs no JSON decoding.
    if text == "[]":
        return []
    return [int(v) for v in json.loads(text)]


def _failures() -> QuerySet[Any]:
    # Per pending job, the nodes where its tasks' latest attempts failed (`_failed_at`).
    return Task.objects.filter(
        job__state=JobState.PENDING, state=TaskState.FAILED, node__isnull=False
    ).annotate(rv=row_version(Task._meta.db_table))


def _load_failures(qs: QuerySet[Any], held: dict[int, int]) -> Any:
    return (
        (pk, rv, job_id, node)
        for pk, rv, job_id, node in qs.values_list("id", "rv", "job_id", "node_id")
    )


def _reservations() -> QuerySet[Any]:
    return Reservation.objects.annotate(rv=row_version(Reservation._meta.db_table))


def _load_reservations(qs: QuerySet[Any], held: dict[int, policy.Reservation]) -> Any:
    for r in qs:
        res = (
            policy.ModelResources(r.cpu, r.memory_mb, r.gpu, r.gpu_model)
            if r.gpu_model and r.gpu > 0
            else policy.Resources(r.cpu, r.memory_mb, r.gpu)
        )
        yield (
            r.pk,
            r.rv,
            r.job_id,
            policy.Reservation(
                job_id=r.job_id,
                node_id=r.node_id,
                resources=res,
                created_at=r.created_at.timestamp(),
            ),
        )


def _accruals() -> QuerySet[Any]:
    # What pending jobs accrued while they ran (`vruntime.py`), by job: a set of its own,
    # so the accrual the cycle adds to running jobs changes no row the cache holds.
    return VruntimeAccrual.objects.filter(job__state=JobState.PENDING).annotate(
        id=F("job_id"), rv=row_version(VruntimeAccrual._meta.db_table)
    )


def _load_accruals(qs: QuerySet[Any], held: dict[int, float]) -> Any:
    return ((pk, rv, pk, v) for pk, rv, v in qs.values_list("id", "rv", "vruntime"))


@dataclass(frozen=True)
class ClusterRows:
    """One row set per thing the snapshot reads; an event names rows by `group_field`."""

    nodes: RowSet[Node]
    quotas: RowSet[policy.Team]
    jobs: RowSet[JobRow]
    tasks: RowSet[TaskRow]
    failures: RowSet[int]  # the node of each failed task of a pending job
    reservations: RowSet[policy.Reservation]
    accruals: RowSet[float]  # a pending job's accrued virtual runtime

    def all(self) -> list[RowSet[Any]]:
        return [
            self.nodes, self.quotas, self.jobs, self.tasks, self.failures, self.reservations,
            self.accruals,
        ]  # fmt: skip


def cluster_rows() -> ClusterRows:
    """Empty row sets: the first check reads them all."""
    return ClusterRows(
        nodes=RowSet("nodes", _nodes, _load_nodes),
        quotas=RowSet("quotas", _quotas, _load_quotas, "team_id"),
        jobs=RowSet("jobs", _jobs, _load_jobs),
        tasks=RowSet("tasks", _tasks, _load_tasks, "job_id"),
        failures=RowSet("failures", _failures, _load_failures, "job_id"),
        reservations=RowSet("reservations", _reservations, _load_reservations, "job_id"),
        accruals=RowSet("accruals", _accruals, _load_accruals, "job_id"),
    )
