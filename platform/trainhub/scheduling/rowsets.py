"""Sets of database rows mirrored in memory, each row kept with its version (PostgreSQL's
`xmin`: the transaction that wrote it), so one query can tell whether the copy drifted.

A `RowSet` is defined by a queryset (which rows belong: the scheduler's snapshot reads
the same filter) and a loader (what to keep of each row). Its fingerprint is the row
count, the sum of the row versions and the sum of id times version (modulo a prime):
every committed change to a row writes a new `xmin`, a row leaving or entering the
filter changes the count or the sums, so the database's fingerprint equals the one
computed from the rows held exactly when the held rows are those the filter selects
now. The fingerprint of the copy is computed from what it holds, never remembered from
the database, so a change missed for any reason (an event lost, a write by another
process, a transaction rolled back after the copy read its rows) is a mismatch, and the
rows are read again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

T = TypeVar("T")
Fingerprint = tuple[int, int, int]
# The third sum weighs each version by its row's id, modulo a prime that keeps the
# database's arithmetic in 64-bit integers (numeric per row cost a third of the check).
_WEIGHT_MODULUS = 1_000_003
# Rows fetched by id per query, when only some changed.
FETCH_BATCH = 5000


def row_version(table: str) -> RawSQL:
    """The version of a row of `table`: the id of the transaction that wrote it."""
    return RawSQL(f"{connection.ops.quote_name(table)}.xmin::text::bigint", ())


@dataclass
class RowSet(Generic[T]):
    """Rows of one filter, by id, each with its version and the group it belongs to (a
    job's tasks belong to the job: an event about the job names the group to read again).

    `select` returns the rows that belong, annotated with `rv` (their version); `load`
    turns such a queryset into `(id, version, group, item)`, given the items held.
    """

    name: str
    select: Callable[[], QuerySet[Any]]
    load: Callable[[QuerySet[Any], dict[int, T]], Iterable[tuple[int, int, Any, T]]]
    group_field: str = "id"
    rows: dict[int, tuple[int, Any, T]] = field(default_factory=dict)
    by_group: dict[Any, set[int]] = field(default_factory=dict)
    # Filled by `put`/`drop`, cleared by whoever consumes it: groups whose rows changed.
    changed_groups: set[Any] = field(default_factory=set)
    # Set while the reading transaction has written: a row it wrote may be written again
    # by it under the same version, so what is read then is kept as version 0 (unknown),
    # and the next check reads it again.
    provisional: bool = False
    _count: int = 0
    _sum: int = 0
    _weighted: int = 0

    def fingerprint(self) -> Fingerprint:
        return (self._count, self._sum, self._weighted)

    def items(self) -> Iterator[T]:
        return (item for _, _, item in self.rows.values())

    def put(self, pk: int, version: int, group: Any, item: T) -> None:
        old = self.rows.get(pk)
        if old is not None and version and old[0] == version:
            return  # the very row held: nothing to rebuild from it
        if old is not None:
            self._forget(pk, old[0], old[1])
            self.changed_groups.add(old[1])
        self.rows[pk] = (version, group, item)
        self.by_group.setdefault(group, set()).add(pk)
        self._count += 1
        self._sum += version
        self._weighted += pk * (version % _WEIGHT_MODULUS)
        self.changed_groups.add(group)

    def drop(self, pk: int) -> None:
        old = self.rows.pop(pk, None)
        if old is not None:
            self._forget(pk, old[0], old[1])
            self.changed_groups.add(old[1])

    def group(self, key: Any) -> list[T]:
        """The items of one group."""
        return [self.rows[pk][2] for pk in self.by_group.get(key, ())]

    def _forget(self, pk: int, version: int, group: Any) -> None:
        members = self.by_group.get(group)
        if members is not None:
            members.discard(pk)
            if not members:
                del self.by_group[group]
        self._count -= 1
        self._sum -= version
        self._weighted -= pk * (version % _WEIGHT_MODULUS)

    def _load(self, queryset: QuerySet[Any]) -> set[int]:
        held = {pk: item for pk, (_, _, item) in self.rows.items()}
        seen = set()
        for pk, version, group, item in self.load(queryset, held):
            self.put(pk, 0 if self.provisional else version, group, item)
            seen.add(pk)
        return seen

    def reload_all(self) -> None:
        """Read every row again (the cold path)."""
        seen = self._load(self.select().order_by())
        for pk in [pk for pk in self.rows if pk not in seen]:
            self.drop(pk)

    def reload_groups(self, groups: set[Any]) -> None:
        """Read again the rows of `groups` (an event named them)."""
        keys = list(groups)
        seen = set()
        for i in range(0, len(keys), FETCH_BATCH):
            batch = keys[i : i + FETCH_BATCH]
            seen |= self._load(self.select().filter(**{f"{self.group_field}__in": batch}))
        for pk in [pk for g in keys for pk in self.by_group.get(g, ()) if pk not in seen]:
            self.drop(pk)

    def resync(self) -> None:
        """Read the ids and versions of the rows that belong, then only the rows that are
        new or changed; drop those that left."""
        if not self.rows:
            self.reload_all()
            return
        listed = dict(self.select().order_by().values_list("id", "rv"))
        for pk in [pk for pk in self.rows if pk not in listed]:
            self.drop(pk)
        stale = [pk for pk, version in listed.items() if self.rows.get(pk, (None,))[0] != version]
        if len(stale) * 10 > len(listed) * 9:  # nearly all: one read of the whole set
            self.reload_all()
            return
        for i in range(0, len(stale), FETCH_BATCH):
            batch = stale[i : i + FETCH_BATCH]
            seen = self._load(self.select().filter(pk__in=batch))
            for pk in set(batch) - seen:  # left the filter since the listing
                self.drop(pk)

    def fingerprint_sql(self) -> tuple[str, tuple[Any, ...]]:
        inner, params = self.select().order_by().values_list("id", "rv").query.sql_with_params()
        sql = (
            "SELECT count(*), coalesce(sum(v), 0),"
            f" coalesce(sum(i * mod(v, {_WEIGHT_MODULUS})), 0)"
            f" FROM ({inner}) AS p(i, v)"
        )
        return sql, tuple(params)


def database_fingerprints(sets: list[RowSet[Any]]) -> tuple[list[Fingerprint], bool]:
    """The fingerprint of each row set as the database holds it now, in one query, and
    whether the current transaction has written anything (its own rows' versions are not
    final: see `RowSet.provisional`)."""
    parts = [s.fingerprint_sql() for s in sets]
    joined = " CROSS JOIN ".join(f"({q}) AS f{i}" for i, (q, _) in enumerate(parts))
    sql = f"SELECT *, txid_current_if_assigned() IS NOT NULL FROM {joined}"
    params = [p for _, ps in parts for p in ps]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    *numbers, wrote = row
    values = [int(v) for v in numbers]
    return [(values[i], values[i + 1], values[i + 2]) for i in range(0, len(values), 3)], wrote
