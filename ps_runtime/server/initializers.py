"""Initializers whose values depend only on (seed, element index), never on call order.

Table rows are created lazily on whichever shard owns them, in whatever order workers
pull them; hashing (seed, id, column) keeps every row's initial value identical however
the table is sharded.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)

INITIALIZERS = ("zeros", "constant", "uniform", "normal")
_SLICE_ELEMENTS = 1 << 18


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """Vectorized splitmix64 finalizer over uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        mixed: np.ndarray = x ^ (x >> np.uint64(31))
        return mixed


def _uniform01(keys: np.ndarray, seed: int, stream: int) -> np.ndarray:
    """Uniform (0, 1) floats, one per key, from a hash of (seed, stream, key)."""
    salt = _splitmix64(np.array([seed * 2 + stream], dtype=np.uint64))[0]
    h = _splitmix64(keys.astype(np.uint64) ^ salt)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def validate(name: str, params: Mapping[str, float]) -> None:
    """Raise ValueError with a fix hint if the initializer spec is not usable."""
    if name not in INITIALIZERS:
        raise ValueError(f"unknown initializer {name!r}; choose one of {list(INITIALIZERS)}")
    allowed = {
        "zeros": set(),
        "constant": {"value"},
        "uniform": {"minval", "maxval", "seed"},
        "normal": {"mean", "stddev", "seed"},
    }[name]
    unknown = set(params) - allowed
    if unknown:
        raise ValueError(f"initializer {name!r} takes {sorted(allowed)}, not {sorted(unknown)}")


def initial_values(
    name: str,
    params: Mapping[str, float],
    row_ids: np.ndarray,
    row_size: int,
    dtype: np.dtype,
) -> np.ndarray:
    """Return a [len(row_ids), row_size] array of initial values for those row ids."""
    validate(name, params)
    n = len(row_ids)
    if name == "zeros":
        return np.zeros((n, row_size), dtype=dtype)
    if name == "constant":
        return np.full((n, row_size), params.get("value", 0.0), dtype=dtype)
    out = np.empty((n, row_size), dtype=dtype)
    step = max(1, _SLICE_ELEMENTS // max(row_size, 1))  # bounds the float64 temporaries
    for start in range(0, n, step):
        ids = row_ids[start : start + step]
        # One key per element: row id * row_size + column (wraps harmlessly for huge ids).
        with np.errstate(over="ignore"):
            keys = (
                ids.astype(np.uint64)[:, None] * np.uint64(row_size)
                + np.arange(row_size, dtype=np.uint64)[None, :]
            )
        out[start : start + step] = _from_keys(name, params, keys, dtype)
    return out


def _from_keys(
    name: str, params: Mapping[str, float], keys: np.ndarray, dtype: np.dtype
) -> np.ndarray:
    seed = int(params.get("seed", 0))
    u1 = _uniform01(keys, seed, 0)
    if name == "uniform":
        lo, hi = params.get("minval", -0.05), params.get("maxval", 0.05)
        return (lo + (hi - lo) * u1).astype(dtype)
    u2 = _uniform01(keys, seed, 1)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller
    normal: np.ndarray = (params.get("mean", 0.0) + params.get("stddev", 1.0) * z).astype(dtype)
    return normal


def dense_initial_value(
    name: str,
    params: Mapping[str, float],
    shape: tuple[int, ...],
    dtype: np.dtype,
    offset: int = 0,
) -> np.ndarray:
    """Return the initial value of a dense variable of `shape`.

    `offset` is the first-axis position of a part of a larger variable: a part gets the
    same values as the matching rows of the whole variable.
    """
    validate(name, params)
    n = int(np.prod(shape, dtype=np.int64))
    if name == "zeros":
        return np.zeros(shape, dtype=dtype)
    if name == "constant":
        return np.full(shape, params.get("value", 0.0), dtype=dtype)
    row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    keys = np.arange(offset * row, offset * row + n, dtype=np.uint64)
    return np.ascontiguousarray(_from_keys(name, params, keys, dtype).reshape(shape))
