"""Placement of variables and table rows over PS shards, and id de-duplication."""

from __future__ import annotations

import numpy as np


def shard_of_ids(ids: np.ndarray, num_shards: int) -> np.ndarray:
    """Shard owning each id: id modulo the number of shards (non-negative)."""
    return np.mod(ids, num_shards)


def split_by_shard(ids: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """Positions into `ids` owned by each shard, one index array per shard."""
    if num_shards == 1:
        return [np.arange(len(ids))]
    owner = shard_of_ids(ids, num_shards)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_shards + 1))
    return [order[bounds[s]:bounds[s + 1]] for s in range(num_shards)]


def dedup_sum(ids: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (unique ids, summed gradient rows), summing rows of duplicate ids.

    Sorts once and sums each run of equal ids with `np.add.reduceat` (vectorized;
    `np.add.at` is an order of magnitude slower).
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    grads = np.asarray(grads)
    if grads.shape[0] != len(ids):
        raise ValueError(f"{len(ids)} ids but {grads.shape[0]} gradient rows")
    if len(ids) == 0:
        return ids, grads
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    if len(starts) == len(ids):
        return sorted_ids, grads[order]
    return sorted_ids[starts], np.add.reduceat(grads[order], starts, axis=0)
