"""Metric points stored as compressed chunks (`MetricChunk`, `codec.py`), and read back.

Each stored batch becomes one chunk row per series (split at `CHUNK_POINTS`), written
in the transaction that counts it against the budget, so what the gateway acknowledges
is stored. A series fed by small batches gathers small chunks; once it has `COMPACT_AT`
of them, they are merged (per task) into chunks of up to `CHUNK_POINTS` in the same kind
of transaction: the old rows are deleted and the new written together, under the
series row's lock (every batch of the series upserts that row first), so a point is
never lost nor stored twice. Reads decode only the chunks a range of steps touches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

import numpy as np
from django.db import transaction
from django.db.models import Q

from .codec import Columns, decode, encode
from .models import MetricChunk, MetricSeries

# Points per chunk row at most: a few kB compressed, decoded in ~0.1 ms.
CHUNK_POINTS = 4096
# A chunk of fewer points is small: merged with the series' other small chunks later.
FULL_CHUNK = 256
# Small chunks a series gathers before they are merged.
COMPACT_AT = 32

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(when: datetime) -> int:
    """`when` (aware) as microseconds since the epoch, exactly."""
    return (when - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(value))


def chunk_rows(job_id: int, task_id: int | None, name: str, columns: Columns) -> list[MetricChunk]:
    """Unsaved chunk rows holding `columns` (ordered by step, then split)."""
    ordered = columns.by_step()
    rows = []
    for i in range(0, len(ordered), CHUNK_POINTS):
        part = ordered.take(slice(i, i + CHUNK_POINTS))
        rows.append(
            MetricChunk(
                job_id=job_id,
                task_id=task_id,
                name=name,
                first_step=int(part.steps[0]),
                last_step=int(part.steps[-1]),
                first_time=from_micros(int(part.times.min())),
                last_time=from_micros(int(part.times.max())),
                count=len(part),
                data=encode(part),
            )
        )
    return rows


def compact_due(job_id: int, small: Mapping[str, int]) -> None:
    """Merge the small chunks of the series that gathered `COMPACT_AT` of them (`small`:
    each series' count, as the batch's upsert of the series rows returned it). Called
    inside the transaction that stored the batch (the series rows are locked)."""
    for name in sorted(name for name, count in small.items() if count >= COMPACT_AT):
        compact(job_id, name)


def compact(job_id: int, name: str) -> int:
    """Merge the small chunks of one series, per task, into as few as `CHUNK_POINTS`
    allows; returns the chunks written. Atomic: the points are either in the old rows
    or in the new ones."""
    with transaction.atomic():
        series = MetricSeries.objects.select_for_update().filter(job_id=job_id, name=name)
        if not series.exists():
            return 0
        small = list(
            MetricChunk.objects.filter(job_id=job_id, name=name, count__lt=FULL_CHUNK)
            .order_by("id")
            .values_list("id", "task_id", "data")
        )
        by_task: dict[int | None, list[Columns]] = defaultdict(list)
        for _, task_id, data in small:
            by_task[task_id].append(decode(data))
        rows = [
            row
            for task_id, parts in by_task.items()
            for row in chunk_rows(job_id, task_id, name, Columns.concat(parts))
        ]
        MetricChunk.objects.filter(pk__in=[pk for pk, _, _ in small]).delete()
        MetricChunk.objects.bulk_create(rows)
        series.update(small_chunks=sum(row.count < FULL_CHUNK for row in rows))
    return len(rows)


def read_series(
    job_id: int,
    names: Iterable[str] | None = None,
    *,
    start: int | None = None,
    end: int | None = None,
) -> dict[str, Columns]:
    """The job's points by name over steps `start..end` (default: all), ordered by step
    (points of one step in the order they were stored). Decodes only the chunks that
    overlap the range."""
    return {name: columns for (_, name), columns in read_jobs([job_id], names, start, end).items()}


def read_jobs(
    job_ids: Iterable[int],
    names: Iterable[str] | None = None,
    start: int | None = None,
    end: int | None = None,
) -> dict[tuple[int, str], Columns]:
    """`read_series` of several jobs at once, by (job id, name); one query."""
    chunks = MetricChunk.objects.filter(job_id__in=list(job_ids))
    if names is not None:
        chunks = chunks.filter(name__in=list(names))
    if start is not None:
        chunks = chunks.filter(last_step__gte=start)
    if end is not None:
        chunks = chunks.filter(first_step__lte=end)
    parts: dict[tuple[int, str], list[Columns]] = defaultdict(list)
    rows = chunks.order_by("job_id", "name", "id").values_list("job_id", "name", "data")
    for job_id, name, data in rows.iterator(chunk_size=500):
        parts[(job_id, name)].append(decode(data))
    out: dict[tuple[int, str], Columns] = {}
    for key, found in parts.items():
        columns = Columns.concat(found).by_step()
        if start is not None or end is not None:
            lo = -(2**63) if start is None else start
            hi = 2**63 - 1 if end is None else end
            columns = columns.take((columns.steps >= lo) & (columns.steps <= hi))
        if len(columns):
            out[key] = columns
    return out


def read_ranges(job_id: int, spans: list[tuple[str, int, int]]) -> list[Columns]:
    """The job's points of each `(name, first step, last step)`, ordered by step, in one
    query that decodes only the chunks overlapping some span."""
    where = Q()
    for name, first, last in spans:
        where |= Q(name=name, last_step__gte=first, first_step__lte=last)
    rows = (
        MetricChunk.objects.filter(where, job_id=job_id)
        .order_by("name", "id")
        .values_list("id", "name", "first_step", "last_step", "data")
    )
    decoded: dict[str, list[tuple[int, int, Columns]]] = defaultdict(list)
    for _, name, first, last, data in rows:
        decoded[name].append((first, last, decode(data)))
    out = []
    for name, first, last in spans:
        parts = [c for lo, hi, c in decoded[name] if hi >= first and lo <= last]
        columns = Columns.concat(parts).by_step()
        out.append(columns.take((columns.steps >= first) & (columns.steps <= last)))
    return out


def columns_of(rows: Iterable[tuple[str, int, float, datetime]]) -> dict[str, Columns]:
    """`(name, step, value, time)` rows as columns per name, in the rows' order."""
    steps: dict[str, list[int]] = defaultdict(list)
    times: dict[str, list[int]] = defaultdict(list)
    values: dict[str, list[float]] = defaultdict(list)
    for name, step, value, when in rows:
        steps[name].append(step)
        times[name].append(micros(when))
        values[name].append(value)
    return {
        name: Columns(
            np.asarray(steps[name], dtype=np.int64),
            np.asarray(times[name], dtype=np.int64),
            np.asarray(values[name], dtype=np.float64),
        )
        for name in steps
    }


def stored_points(
    job_ids: Iterable[int] | None = None,
) -> list[tuple[int, int | None, str, int, float, datetime]]:
    """Every stored point, as `(job id, task id, name, step, value, time)` ordered by job,
    name and step (points of one step as stored): for tools, tests and checks, which
    decode every chunk."""
    chunks = MetricChunk.objects.all()
    if job_ids is not None:
        chunks = chunks.filter(job_id__in=list(job_ids))
    rows = chunks.order_by("job_id", "name", "id").values_list("job_id", "task_id", "name", "data")
    found: dict[tuple[int, str], list[tuple[int | None, Columns]]] = defaultdict(list)
    for job_id, task_id, name, data in rows:
        found[(job_id, name)].append((task_id, decode(data)))
    out = []
    for (job_id, name), parts in found.items():
        tasks = np.concatenate([np.full(len(c), -1 if t is None else t) for t, c in parts])
        columns = Columns.concat([c for _, c in parts])
        order = np.argsort(columns.steps, kind="stable")
        for task, step, value, when in zip(
            tasks[order].tolist(),
            columns.steps[order].tolist(),
            columns.values[order].tolist(),
            columns.times[order].tolist(),
            strict=True,
        ):
            out.append((job_id, None if task < 0 else task, name, step, value, from_micros(when)))
    return out
