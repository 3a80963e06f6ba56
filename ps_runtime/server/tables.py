"""Embedding tables on one PS shard: contiguous rows, a hash index and a row lifecycle.

Rows live in one contiguous [capacity, dim] array (plus slot arrays beside it); an
`IdIndex` maps ids to row numbers. Rows are created on first pull (get-or-create)
with the table's initializer, which depends only on (seed, id), so a row's first
value is the same however the table is sharded.

Lifecycle for online training (all optional):
- admission: an id gets a row only once it was pulled `admit_after` times; until then
  pulls return its initial value and pushes to it are dropped;
- eviction: rows not touched for `evict_after_steps` table steps (pushes) are dropped,
  and when creating rows would pass `max_rows` the least recently used rows go first.
Evicted rows are refilled from the end, so rows [0, size) stay dense.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ps_runtime.server import initializers
from ps_runtime.server.id_index import IdIndex
from ps_runtime.server.optimizers import Optimizer, take_rows


@dataclass(frozen=True)
class Lifecycle:
    """Admission and eviction settings; 0 disables each."""

    admit_after: int = 0
    evict_after_steps: int = 0
    max_rows: int = 0

    def to_json(self) -> dict[str, int]:
        """JSON form stored in checkpoints."""
        return {
            "admit_after": self.admit_after,
            "evict_after_steps": self.evict_after_steps,
            "max_rows": self.max_rows,
        }


@dataclass
class TableCounters:
    """Monotonic counters reported by Stats."""

    pulls: int = 0
    pushes: int = 0
    evicted: int = 0
    dropped: int = 0


def _unique(ids: np.ndarray) -> bool:
    """True if no id repeats; O(n) for the sorted ids clients send, else a hash pass."""
    if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):
        return True
    return len(np.unique(ids)) == len(ids)


class StoredTable:
    """Rows keyed by int64 ids on one shard (see the module docstring)."""

    def __init__(
        self,
        name: str,
        spec: Any,
        optimizer: Optimizer,
        lifecycle: Lifecycle,
        expected_rows: int = 0,
    ) -> None:
        self.name = name
        self.spec = spec
        self.optimizer = optimizer
        self.lifecycle = lifecycle
        self.lock = threading.Lock()  # guards every array below
        self.version = 0
        self.counters = TableCounters()
        self.dim = int(spec.shape[0])
        self.dtype = np.dtype(spec.dtype)
        capacity = max(
            16,
            expected_rows
            if not lifecycle.max_rows
            else min(expected_rows or lifecycle.max_rows, lifecycle.max_rows),
        )
        self.size = 0
        self.values = np.zeros((capacity, self.dim), dtype=self.dtype)
        self.slots: dict[str, np.ndarray] = {
            **optimizer.init_slots((capacity, self.dim), self.dtype),
            **optimizer.init_row_slots(capacity),
        }
        self.row_ids = np.zeros(capacity, dtype=np.int64)
        self.last_touch = np.zeros(capacity, dtype=np.int64)
        self.index = IdIndex(capacity)
        self._pending = IdIndex()  # ids seen but not admitted yet -> slot in _seen
        self._seen = np.zeros(0, dtype=np.int64)
        self._seen_used = 0  # slots of _seen handed out since the last clear

    # ---------------------------------------------------------------- storage

    @property
    def capacity(self) -> int:
        """Allocated rows."""
        return len(self.values)

    def _reserve(self, needed: int) -> None:
        """Grow the row arrays in place (realloc, no 2x copy) to hold `needed` rows."""
        if needed <= self.capacity:
            return
        new = max(needed, self.capacity + self.capacity // 2)
        if self.lifecycle.max_rows:
            new = min(new, max(needed, self.lifecycle.max_rows))
        old = self.capacity
        self.values.resize((new, self.dim), refcheck=False)
        for k, slot in self.slots.items():
            slot.resize((new, *slot.shape[1:]), refcheck=False)
            if k in self.optimizer.slot_names:
                slot[old:] = self.optimizer.slot_initial_value(k)
        self.row_ids.resize(new, refcheck=False)
        self.last_touch.resize(new, refcheck=False)

    def initial_rows(self, ids: np.ndarray) -> np.ndarray:
        """The initializer's values for `ids`."""
        name, params = self.spec.initializer
        return initializers.initial_values(name, dict(params), ids, self.dim, self.dtype)

    def insert_rows(
        self,
        ids: np.ndarray,
        values: np.ndarray | None = None,
        slots: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Append rows for unique absent `ids` (initial values unless given); hold the lock."""
        n = len(ids)
        if self.lifecycle.max_rows:
            if n > self.lifecycle.max_rows:
                raise ValueError(
                    f"one request creates {n} rows in table {self.name!r}, more "
                    f"than its row budget {self.lifecycle.max_rows}"
                )
            overflow = self.size + n - self.lifecycle.max_rows
            if overflow > 0:  # evict a little extra so this does not run on every pull
                self._evict_lru(overflow + self.lifecycle.max_rows // 20)
        start = self.size
        self._reserve(start + n)
        rows = np.arange(start, start + n)
        self.values[start : start + n] = self.initial_rows(ids) if values is None else values
        for k, slot in self.slots.items():
            if slots is not None and k in slots:
                slot[start : start + n] = slots[k]
            else:
                slot[start : start + n] = (
                    self.optimizer.slot_initial_value(k) if k in self.optimizer.slot_names else 0
                )
        self.row_ids[start : start + n] = ids
        self.last_touch[start : start + n] = self.version
        self.index.insert(ids, rows)
        self.size = start + n
        return rows

    def _evict_rows(self, rows: np.ndarray) -> None:
        """Drop `rows` (unique) and move the last live rows into the holes."""
        if len(rows) == 0:
            return
        new_size = self.size - len(rows)
        self.index.delete(self.row_ids[rows])
        gone = np.zeros(self.size - new_size, dtype=bool)
        tail = rows[rows >= new_size]
        gone[tail - new_size] = True
        movers = new_size + np.flatnonzero(~gone)
        holes = np.sort(rows[rows < new_size])
        if len(holes):
            self.values[holes] = self.values[movers]
            for slot in self.slots.values():
                slot[holes] = slot[movers]
            self.row_ids[holes] = self.row_ids[movers]
            self.last_touch[holes] = self.last_touch[movers]
            self.index.set_values(self.row_ids[holes], holes)
        self.size = new_size
        self.counters.evicted += len(rows)

    def _evict_lru(self, count: int) -> None:
        count = min(count, self.size)
        if count <= 0:
            return
        touch = self.last_touch[: self.size]
        victims = (
            np.argpartition(touch, count - 1)[:count] if count < self.size else np.arange(self.size)
        )
        self._evict_rows(victims)

    def evict_stale(self) -> int:
        """Drop rows untouched for `evict_after_steps` steps; return how many."""
        after = self.lifecycle.evict_after_steps
        if not after:
            return 0
        with self.lock:
            stale = np.flatnonzero(self.last_touch[: self.size] < self.version - after)
            self._evict_rows(stale)
            return len(stale)

    # ------------------------------------------------------------ admission

    def _admit(self, new_ids: np.ndarray) -> np.ndarray:
        """Count one sighting of each (unique, absent) id; return those now admitted."""
        k = self.lifecycle.admit_after
        if k <= 1:
            return new_ids
        limit = max(self.lifecycle.max_rows, 1 << 20)
        if self._seen_used + len(new_ids) > limit:  # bound the memory of the counters
            self._pending.clear()
            self._seen_used = 0
        slots = self._pending.get(new_ids)
        fresh = slots < 0
        if fresh.any():
            start = self._seen_used
            fresh_slots = np.arange(start, start + int(fresh.sum()))
            self._seen_used += len(fresh_slots)
            if fresh_slots[-1] >= len(self._seen):
                self._seen = np.resize(self._seen, max(16, 2 * (fresh_slots[-1] + 1)))
            self._seen[fresh_slots] = 0
            self._pending.insert(new_ids[fresh], fresh_slots)
            slots[fresh] = fresh_slots
        self._seen[slots] += 1
        admitted = self._seen[slots] >= k
        if admitted.any():
            self._pending.delete(new_ids[admitted])  # their counter slots stay unused
        result: np.ndarray = new_ids[admitted]
        return result

    @property
    def pending_admission(self) -> int:
        """Ids seen but not admitted yet."""
        return self._pending.size

    # ------------------------------------------------------------ pull / push

    def pull(self, ids: np.ndarray) -> np.ndarray:
        """Rows of `ids` ([n, dim]); creates missing (admitted) rows."""
        with self.lock:
            self.counters.pulls += 1
            rows = self.index.get(ids)
            missing = rows < 0
            if missing.any():
                new_ids = np.unique(ids[missing])
                admitted = self._admit(new_ids)
                if len(admitted):
                    self.last_touch[rows[~missing]] = self.version  # not LRU victims now
                    self.insert_rows(admitted)
                    rows = self.index.get(ids)  # eviction may have moved rows
                    missing = rows < 0
            tracks = self.lifecycle.max_rows or self.lifecycle.evict_after_steps
            if not missing.any():
                if tracks:
                    self.last_touch[rows] = self.version
                return take_rows(self.values, rows)
            out = np.empty((len(ids), self.dim), dtype=self.dtype)
            have = ~missing
            out[have] = self.values[rows[have]]
            if tracks:
                self.last_touch[rows[have]] = self.version
            out[missing] = self.initial_rows(ids[missing])
            return out

    def push(self, ids: np.ndarray, grads: np.ndarray) -> int:
        """Apply row gradients for unique `ids`; return the new version."""
        if grads.shape != (len(ids), self.dim):
            raise ValueError(
                f"gradients of shape {grads.shape} do not match {len(ids)} ids x dim {self.dim}"
            )
        with self.lock:
            rows = self.index.get(ids)
            missing = rows < 0
            if missing.any():
                if self.lifecycle.admit_after > 1:
                    self.counters.dropped += int(missing.sum())
                    keep = ~missing
                    ids, grads, rows = ids[keep], grads[keep], rows[keep]
                else:
                    self.insert_rows(np.unique(ids[missing]))
                    rows = self.index.get(ids)
            if not _unique(ids):
                raise ValueError("ids in a push must be unique; sum duplicate gradients first")
            self.version += 1
            self.counters.pushes += 1
            self.optimizer.apply_rows(self.values, rows, grads, self.slots, self.version)
            if self.lifecycle.max_rows or self.lifecycle.evict_after_steps:
                self.last_touch[rows] = self.version
            after = self.lifecycle.evict_after_steps
            version = self.version
        if after and version % max(1, after // 4) == 0:
            self.evict_stale()
        return version

    # ------------------------------------------------------------ inspection

    def ids(self) -> np.ndarray:
        """All ids with a row, in row order."""
        return self.row_ids[: self.size].copy()

    def clear(self) -> None:
        """Drop every row (before a restore)."""
        with self.lock:
            self.index.clear()
            self.size = 0

    def nbytes(self) -> int:
        """Bytes held by values, slots, ids and the index (allocated capacity)."""
        return int(
            self.values.nbytes
            + sum(s.nbytes for s in self.slots.values())
            + self.row_ids.nbytes
            + self.last_touch.nbytes
            + self.index.nbytes()
            + self._pending.nbytes()
            + self._seen.nbytes
        )
