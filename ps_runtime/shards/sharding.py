"""Placement of variables and table rows over PS shards, and id de-duplication.

- Table rows: a row belongs to shard `hash(id) % num_shards` (a multiplicative hash,
  so consecutive or strided ids still spread evenly).
- Dense variables: a partitioner decides how many parts along the first axis
  (1 = whole); each part (or whole variable) goes to the least-loaded shard by bytes,
  which is round-robin for equal sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)

# (shape, dtype itemsize, number of shards) -> number of parts along axis 0.
Partitioner = Callable[[tuple[int, ...], int, int], int]


def shard_of_ids(ids: np.ndarray, num_shards: int) -> np.ndarray:
    """Shard owning each id (hash of the id modulo the number of shards)."""
    if num_shards == 1:
        return np.zeros(len(ids), dtype=np.int64)
    with np.errstate(over="ignore"):
        h = (np.asarray(ids).astype(np.uint64) * _GOLDEN) >> np.uint64(32)
    return (h % np.uint64(num_shards)).astype(np.int64)


def split_by_shard(ids: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """Positions into `ids` owned by each shard, one index array per shard."""
    if num_shards == 1:
        return [np.arange(len(ids))]
    owner = shard_of_ids(ids, num_shards)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_shards + 1))
    return [order[bounds[s] : bounds[s + 1]] for s in range(num_shards)]


@dataclass(frozen=True)
class Dedup:
    """Unique ids of a batch plus what is needed to gather by and sum into them.

    `unique[inverse] == ids`; `order` sorts `ids`; `starts` are the first positions of
    each run of equal ids in sorted order. Ids seen once are copied; only the runs of
    repeated ids go through `np.add.reduceat` (whose cost is per run).
    """

    unique: np.ndarray
    inverse: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    single_rows: np.ndarray  # unique ids seen once: their row in `unique` ...
    single_pos: np.ndarray  # ... and their position in the batch
    multi_rows: np.ndarray  # unique ids seen more than once
    multi_pos: np.ndarray  # positions of their occurrences, run by run
    multi_starts: np.ndarray  # where each run starts in multi_pos

    def sum(self, grads: np.ndarray, per: int = 1) -> np.ndarray:
        """Sum the gradient rows of duplicate ids: one row per unique id.

        With `per` > 1, `grads` has one row per `per` consecutive positions (e.g. one
        per example whose `per` ids all get that example's gradient).
        """
        if len(self.order) == 0:
            return grads[:0]
        out = np.empty((len(self.unique), *grads.shape[1:]), dtype=grads.dtype)
        single = self.single_pos if per == 1 else self.single_pos // per
        out[self.single_rows] = grads[single]
        if len(self.multi_rows):
            multi = self.multi_pos if per == 1 else self.multi_pos // per
            out[self.multi_rows] = np.add.reduceat(grads[multi], self.multi_starts, axis=0)
        return out


def dedup(ids: np.ndarray) -> Dedup:
    """Sort once; derive unique ids, the inverse map and the runs to sum."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    n = len(ids)
    bits = max(1, (n - 1).bit_length())
    if n and ids.min() >= 0 and int(ids.max()) < 1 << (63 - bits):
        # Sort (id, position) packed into one int64: a plain sort is several times
        # faster than an argsort and yields both the sorted ids and the order.
        packed = np.sort((ids << bits) | np.arange(n, dtype=np.int64))
        sorted_ids = packed >> bits
        order = packed & ((1 << bits) - 1)
    else:
        order = np.argsort(ids)  # order within a run does not matter for sums
        sorted_ids = ids[order]
    new_run = np.empty(len(ids), dtype=bool)
    if len(ids):
        new_run[0] = True
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=new_run[1:])
    starts = np.flatnonzero(new_run)
    inverse = np.empty(len(ids), dtype=np.int64)
    inverse[order] = np.cumsum(new_run) - 1
    counts = np.diff(starts, append=len(ids))
    once = counts == 1
    single_rows = np.flatnonzero(once)
    multi_rows = np.flatnonzero(~once)
    in_multi = np.repeat(~once, counts)
    multi_counts = counts[multi_rows]
    multi_starts = np.zeros(len(multi_rows), dtype=np.int64)
    np.cumsum(multi_counts[:-1], out=multi_starts[1:])
    return Dedup(
        sorted_ids[starts],
        inverse,
        order,
        starts,
        single_rows,
        order[starts[single_rows]],
        multi_rows,
        order[in_multi],
        multi_starts,
    )


def dedup_sum(ids: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (unique ids, summed gradient rows), summing rows of duplicate ids.

    Sorts once and sums each run of equal ids with `np.add.reduceat` (vectorized;
    `np.add.at` is an order of magnitude slower).
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    grads = np.asarray(grads)
    if grads.shape[0] != len(ids):
        raise ValueError(f"{len(ids)} ids but {grads.shape[0]} gradient rows")
    d = dedup(ids)
    return d.unique, d.sum(grads)


# ------------------------------------------------------------------ dense placement


def min_size_partitioner(min_part_bytes: int = 4 << 20, max_parts: int = 0) -> Partitioner:
    """Split a variable into as many parts as shards, but no part under `min_part_bytes`."""

    def partition(shape: tuple[int, ...], itemsize: int, num_shards: int) -> int:
        if not shape:
            return 1
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        limit = min(num_shards, max_parts or num_shards, shape[0])
        return max(1, min(limit, nbytes // max(1, min_part_bytes)))

    return partition


def fixed_shards_partitioner(num_parts: int) -> Partitioner:
    """Split every variable with at least `num_parts` rows into `num_parts` parts."""

    def partition(shape: tuple[int, ...], itemsize: int, num_shards: int) -> int:
        return max(1, min(num_parts, shape[0] if shape else 1))

    return partition


def whole_partitioner(shape: tuple[int, ...], itemsize: int, num_shards: int) -> int:
    """Never split."""
    return 1


def part_rows(rows: int, parts: int) -> list[tuple[int, int]]:
    """(offset, length) of each part when `rows` are split into `parts` near-equal parts."""
    base, extra = divmod(rows, parts)
    out, offset = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((offset, n))
        offset += n
    return out


def place(sizes: Sequence[int], loads: list[int]) -> list[int]:
    """Shard for each part: the least-loaded shard not yet used by this variable."""
    chosen: list[int] = []
    for size in sizes:
        free = [s for s in range(len(loads)) if s not in chosen] or list(range(len(loads)))
        shard = min(free, key=lambda s: (loads[s], s))
        loads[shard] += size
        chosen.append(shard)
    return chosen
