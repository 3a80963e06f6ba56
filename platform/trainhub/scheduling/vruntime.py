"""Jobs' virtual runtime (§3 "Order"): what the job's row holds (`Job.vruntime`) plus what
it accrued while running, kept in a narrow table of its own (`VruntimeAccrual`).

Every committed cycle adds to every running job's virtual runtime; written into the job's
row, that gave thousands of rows a new version each cycle, and every process's cluster
cache (`cache.py`) read them all again. Only a pending job's virtual runtime orders
anything (`policy.order.team_queue_key`), so the scheduler's view of a job counts its
accrual only while the job is pending, and the cache holds pending jobs' accrual rows
as a row set of their own (`clusterrows.py`): the cycle's additions to running jobs
change no row it holds.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Case, F, FloatField, OuterRef, Subquery, Value, When
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Coalesce

from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job

from .models import VruntimeAccrual


def seen_vruntime() -> CombinedExpression:
    """A job's virtual runtime as the scheduler sees it (annotate a `Job` queryset): its
    row's, plus its accrual while it is pending."""
    accrued = VruntimeAccrual.objects.filter(job_id=OuterRef("pk")).values("vruntime")
    return F("vruntime") + Case(
        When(state=JobState.PENDING, then=Coalesce(Subquery(accrued), Value(0.0))),
        default=Value(0.0),
        output_field=FloatField(),
    )


def add_vruntime(increments: list[tuple[float, int]]) -> None:
    """Add `(increment, job id)` to each job's accrual (jobs deleted meanwhile skipped)."""
    q = connection.ops.quote_name
    table = q(VruntimeAccrual._meta.db_table)
    jobs = q(Job._meta.db_table)
    increments = sorted(increments, key=lambda pair: pair[1])  # rows locked in one order
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # one statement for every running job
            cursor.execute(
                f"INSERT INTO {table} AS a (job_id, vruntime)"
                f" SELECT v.id, v.add FROM unnest(%s::float8[], %s::bigint[]) AS v(add, id)"
                f" JOIN {jobs} j ON j.id = v.id"
                " ON CONFLICT (job_id) DO UPDATE SET vruntime = a.vruntime + EXCLUDED.vruntime",
                [[add for add, _ in increments], [job_id for _, job_id in increments]],
            )
        else:  # SQLite (standalone): one statement per job
            cursor.executemany(
                f"INSERT INTO {table} (job_id, vruntime)"
                f" SELECT id, %s FROM {jobs} WHERE id = %s"
                " ON CONFLICT (job_id) DO UPDATE SET vruntime = vruntime + excluded.vruntime",
                increments,
            )
