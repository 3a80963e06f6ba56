"""Writing metric points: their chunks, series rows and rollups, together.

A batch's points become chunk rows (`chunks.chunk_rows`), an upsert of their series rows
(first and last step, count, small chunks) and one of their rollups (`rollups.py`). On
PostgreSQL the three are one statement (data-modifying CTEs over arrays, one round trip
whatever the rows); on SQLite, three. Inside `deferred_writes` (the gateway's group
commit) the rows of every batch stored are gathered, merged by key in arrival order, and
written in one statement when the block ends, before its transaction commits; a series
that then has `chunks.COMPACT_AT` small chunks is compacted in that transaction.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from .chunks import FULL_CHUNK, chunk_rows, columns_of, compact_due, micros
from .codec import Columns
from .models import MetricChunk, MetricRollup, MetricSeries
from .rollups import Summary, rollup_columns

# Rows per upsert statement on SQLite: 9 parameters each stays well under its limit on
# bound parameters.
UPSERT_ROWS = 500

SeriesRow = tuple[int, str, int, int, int, int]  # job, name, first, last step, count, small
RollupKey = tuple[int, str, int, int]  # job, name, level, block


@dataclass
class Writes:
    """Rows to write, merged by key in arrival order."""

    series: dict[tuple[int, str], SeriesRow] = field(default_factory=dict)
    rollups: dict[RollupKey, Summary] = field(default_factory=dict)
    chunks: list[MetricChunk] = field(default_factory=list)

    def add(self, job_id: int, task_id: int | None, series: Mapping[str, Columns]) -> None:
        rows = [
            row
            for name, columns in series.items()
            for row in chunk_rows(job_id, task_id, name, columns)
        ]
        self.chunks.extend(rows)
        small = Counter(row.name for row in rows if row.count < FULL_CHUNK)
        self.add_summaries(job_id, series, small)

    def add_summaries(
        self, job_id: int, series: Mapping[str, Columns], small: Mapping[str, int]
    ) -> None:
        for name, c in series.items():
            row = (job_id, name, int(c.steps.min()), int(c.steps.max()), len(c), small.get(name, 0))
            old = self.series.get((job_id, name))
            if old is not None:
                row = (
                    job_id,
                    name,
                    min(old[2], row[2]),
                    max(old[3], row[3]),
                    old[4] + row[4],
                    old[5] + row[5],
                )
            self.series[(job_id, name)] = row
        for (name, level, block), summary in rollup_columns(series).items():
            found = self.rollups.get((job_id, name, level, block))
            if found is None:
                self.rollups[(job_id, name, level, block)] = summary
            else:
                found.add(summary)  # arrived after what it is folded into

    def write(self) -> None:
        """Write the rows (in key order, so that two writers never wait on each other's
        rows in opposite orders), then compact the series that gathered enough small
        chunks. Inside a transaction."""
        if not self.series:
            return
        gathered = _write(
            [self.series[key] for key in sorted(self.series)],
            [
                (*key, s.min, s.max, s.count, s.last_step, s.last_value)
                for key, s in sorted(self.rollups.items())
            ],
            self.chunks,
        )
        if any(row.count < FULL_CHUNK for row in self.chunks):
            for job_id in sorted({job_id for job_id, _, _ in gathered}):
                compact_due(job_id, {n: s for j, n, s in gathered if j == job_id})


_deferred = threading.local()


@contextlib.contextmanager
def deferred_writes() -> Iterator[Writes]:
    """Gather what `store_series` stores in the block; write it when the block ends
    (unless it raised). Call inside `transaction.atomic()`."""
    outer = getattr(_deferred, "writes", None)
    writes = _deferred.writes = Writes()
    try:
        yield writes
        writes.write()
    finally:
        _deferred.writes = outer


def store_series(job_id: int, task_id: int | None, series: Mapping[str, Columns]) -> None:
    """Store points as chunks and fold them into the job's series and rollups, with no
    budget (ingest charged it; tools and tests seed with it directly): at once in a
    transaction of its own (or the caller's), or in a `deferred_writes` block at its
    end. The series rows are upserted first (their lock orders the batches of one
    series; they return its small chunks), then the chunks written and, when due, a
    series' small chunks merged."""
    series = {name: columns for name, columns in series.items() if len(columns)}
    if not series:
        return
    deferred = getattr(_deferred, "writes", None)
    if deferred is not None:
        deferred.add(job_id, task_id, series)
        return
    writes = Writes()
    writes.add(job_id, task_id, series)
    with transaction.atomic(savepoint=False):
        writes.write()


def write_points(
    job_id: int,
    rows: Iterable[tuple[str, int, float]],
    *,
    task_id: int | None = None,
    time: datetime | None = None,
) -> None:
    """Store `(name, step, value)` points of a job at `time` (default: now) as ingest
    would, without a budget: how tools, benchmarks and tests seed metrics."""
    when = time or timezone.now()
    store_series(job_id, task_id, columns_of((n, s, float(v), when) for n, s, v in rows))


def store_rollups(job_id: int, points: list[tuple[str, int, float]]) -> None:
    """Fold stored `(name, step, value)` points of a job, in arrival order, into its
    series and rollups (`store_series` without the chunks)."""
    series = columns_of((name, step, value, _NO_TIME) for name, step, value in points)
    writes = Writes()
    writes.add_summaries(job_id, series, {})
    with transaction.atomic(savepoint=False):
        writes.write()


_NO_TIME = datetime(1970, 1, 1, tzinfo=UTC)

_SERIES = ("job_id", "name", "first_step", "last_step", "count", "small_chunks")
_ROLLUP = (
    "job_id",
    "name",
    "level",
    "block",
    "min_value",
    "max_value",
    "count",
    "last_step",
    "last_value",
)
_CHUNK = (
    "job_id",
    "task_id",
    "name",
    "first_step",
    "last_step",
    "first_time",
    "last_time",
    "count",
    "data",
)
_SQL_TYPES = {
    "job_id": "bigint",
    "task_id": "bigint",
    "name": "text",
    "level": "smallint",
    "block": "bigint",
    "first_step": "bigint",
    "last_step": "bigint",
    "count": "bigint",
    "small_chunks": "integer",
    "min_value": "double precision",
    "max_value": "double precision",
    "last_value": "double precision",
}


def _merge(least: str, greatest: str) -> dict[str, str]:
    return {
        "first_step": f"{least}(t.first_step, excluded.first_step)",
        "min_value": f"{least}(t.min_value, excluded.min_value)",
        "max_value": f"{greatest}(t.max_value, excluded.max_value)",
        "count": "t.count + excluded.count",
        "small_chunks": "t.small_chunks + excluded.small_chunks",
        # Read before last_step changes: every SET expression sees the old row.
        "last_value": (
            "CASE WHEN excluded.last_step >= t.last_step"
            " THEN excluded.last_value ELSE t.last_value END"
        ),
        "last_step": f"{greatest}(t.last_step, excluded.last_step)",
    }


def _upsert_sql(table: str, columns: tuple[str, ...], key: tuple[str, ...], source: str) -> str:
    q = connection.ops.quote_name
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    merge = _merge(least, greatest)
    updates = ", ".join(f"{q(c)} = {merge[c]}" for c in columns if c not in key)
    return (
        f"INSERT INTO {q(table)} AS t ({', '.join(q(c) for c in columns)}) {source} "
        f"ON CONFLICT ({', '.join(q(c) for c in key)}) DO UPDATE SET {updates}"
    )


def _array(values: Iterable[Any], sql_type: str) -> str:
    """A PostgreSQL array literal of `values` (one parameter: psycopg's quoting of a
    list costs microseconds per element in Python)."""
    if sql_type == "text":
        items = ('"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    elif sql_type == "double precision":
        items = (repr(float(v)) for v in values)  # the shortest repr that reads back exactly
    else:
        items = ("NULL" if v is None else str(int(v)) for v in values)
    return "{" + ",".join(items) + "}"


def _unnest(columns: tuple[str, ...], rows: list[Any]) -> tuple[str, list[Any]]:
    arrays = ", ".join(f"%s::{_SQL_TYPES[c]}[]" for c in columns)
    params = [
        _array(column, _SQL_TYPES[c])
        for c, column in zip(columns, zip(*rows, strict=True), strict=True)
    ]
    return f"SELECT * FROM unnest({arrays})", params


def _write(
    series: list[SeriesRow], rollups: list[tuple[Any, ...]], rows: list[MetricChunk]
) -> list[tuple[int, str, int]]:
    """Upsert the series and rollup rows and insert the chunks; returns each series'
    (job, name, small chunks) after."""
    series_key, rollup_key = ("job_id", "name"), ("job_id", "name", "level", "block")
    if connection.vendor != "postgresql":
        gathered = _upsert_rows(MetricSeries._meta.db_table, _SERIES, series_key, series)
        _upsert_rows(MetricRollup._meta.db_table, _ROLLUP, rollup_key, rollups)
        MetricChunk.objects.bulk_create(rows)
        return gathered
    source, params = _unnest(_SERIES, series)
    upsert_series = _upsert_sql(MetricSeries._meta.db_table, _SERIES, series_key, source)
    source, more = _unnest(_ROLLUP, rollups)
    upsert_rollups = _upsert_sql(MetricRollup._meta.db_table, _ROLLUP, rollup_key, source)
    params += more
    q = connection.ops.quote_name
    ctes = [
        f"s AS ({upsert_series} RETURNING job_id, name, small_chunks)",
        f"r AS ({upsert_rollups})",
    ]
    if rows:
        arrays = ", ".join(f"%s::{_SQL_TYPES[c]}[]" for c in _CHUNK[:5]) + ", %s::bigint[]"
        arrays += ", %s::bigint[], %s::integer[], %s::bytea[]"
        epoch = "timestamptz 'epoch' + interval '1 microsecond' *"
        ctes.append(
            f"c AS (INSERT INTO {q(MetricChunk._meta.db_table)} "
            f"({', '.join(q(c) for c in _CHUNK)}) "
            f"SELECT j, t, n, f, l, {epoch} ft, {epoch} lt, k, d "
            f"FROM unnest({arrays}) AS x(j, t, n, f, l, ft, lt, k, d))"
        )
        params += [
            _array([r.job_id for r in rows], "bigint"),
            _array([r.task_id for r in rows], "bigint"),
            _array([r.name for r in rows], "text"),
            _array([r.first_step for r in rows], "bigint"),
            _array([r.last_step for r in rows], "bigint"),
            _array([micros(r.first_time) for r in rows], "bigint"),
            _array([micros(r.last_time) for r in rows], "bigint"),
            _array([r.count for r in rows], "integer"),
            [bytes(r.data) for r in rows],
        ]
    with connection.cursor() as cursor:
        # The series first: the main query reads them (the other statements run after).
        cursor.execute(f"WITH {', '.join(ctes)} SELECT job_id, name, small_chunks FROM s", params)
        return [tuple(row) for row in cursor.fetchall()]


def _upsert_rows(
    table: str, columns: tuple[str, ...], key: tuple[str, ...], rows: list[Any]
) -> list[tuple[int, str, int]]:
    """SQLite's upserts, `UPSERT_ROWS` at a time; returns (job, name, small chunks) of the
    rows written where the table has small chunks."""
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    returning = " RETURNING job_id, name, small_chunks" if "small_chunks" in columns else ""
    out: list[tuple[int, str, int]] = []
    with connection.cursor() as cursor:
        for i in range(0, len(rows), UPSERT_ROWS):
            part = rows[i : i + UPSERT_ROWS]
            values = f"VALUES {', '.join([row] * len(part))}"
            sql = _upsert_sql(table, columns, key, values) + returning
            cursor.execute(sql, [value for r in part for value in r])
            if returning:
                out.extend(tuple(r) for r in cursor.fetchall())
    return out
