"""Handles to variables and embedding tables that live on the PS shards.

Handles are cheap to send to workers: they travel as JSON (name, placement, PS
addresses) and are rebound on the worker to that worker's own PS client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ps_runtime.client.client import PendingDense, PendingPush, PendingRows, PSClient


class PendingValue:
    """A dense value being pulled (possibly as several parts); `result()` assembles it."""

    def __init__(
        self, parts: list[PendingDense], shape: tuple[int, ...], out: np.ndarray | None = None
    ) -> None:
        self._parts = parts
        self._shape = shape
        self._out = out

    def result(self) -> np.ndarray:
        """Wait for every part and return the whole value."""
        values = [f.result() for f in self._parts]
        if self._out is not None:
            return self._out
        if len(values) == 1:
            return values[0].reshape(self._shape)
        return np.concatenate(values, axis=0)


class Variable:
    """A dense variable on the PS: whole on one shard, or sliced along axis 0 into parts.

    `parts` lists (shard, row_offset, rows) per part; part i is stored as `name/part-i`.
    """

    def __init__(
        self,
        client: PSClient,
        name: str,
        shard: int,
        shape: Sequence[int],
        dtype: Any,
        parts: Sequence[tuple[int, int, int]] | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.shard = shard
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.parts = [tuple(int(x) for x in p) for p in parts] if parts else []

    def __repr__(self) -> str:
        where = f"parts={self.parts}" if self.parts else f"ps={self.shard}"
        return f"Variable({self.name!r}, shape={self.shape}, dtype={self.dtype}, {where})"

    @property
    def nbytes(self) -> int:
        """Size of the whole value in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * int(self.dtype.itemsize)

    def _row_bytes(self) -> int:
        return self.nbytes // max(1, self.shape[0]) if self.shape else self.nbytes

    def part_name(self, i: int) -> str:
        """Key of part `i` on its shard."""
        return f"{self.name}/part-{i}"

    def read_async(self, out: np.ndarray | None = None) -> PendingValue:
        """Start pulling the value (all parts at once); `.result()` returns it."""
        if not self.parts:
            return PendingValue(
                [self.client.pull_dense_async(self.shard, self.name, self.nbytes, out)], self.shape
            )
        if out is None:  # parts land in their rows of one array (no concatenation)
            out = np.empty(self.shape, dtype=self.dtype)
        futures = [
            self.client.pull_dense_async(
                s, self.part_name(i), rows * self._row_bytes(), out[off : off + rows]
            )
            for i, (s, off, rows) in enumerate(self.parts)
        ]
        return PendingValue(futures, self.shape, out)

    def read(self, out: np.ndarray | None = None) -> np.ndarray:
        """Pull the current value (into `out`, a reusable buffer, when given)."""
        if not self.parts:
            return self.client.pull_dense(self.shard, self.name, self.nbytes, out)
        return self.read_async(out).result()

    def push_gradient(self, grad: np.ndarray) -> int:
        """Send a gradient; the PS applies the variable's optimizer. Returns the version."""
        grad = np.asarray(grad)
        if not self.parts:
            return self.client.push_dense(self.shard, self.name, grad)
        if grad.shape != self.shape:
            raise ValueError(f"gradient shape {grad.shape} does not match {self.shape}")
        futures = [
            self.client.push_dense_async(s, self.part_name(i), grad[off : off + rows])
            for i, (s, off, rows) in enumerate(self.parts)
        ]
        return min(f.result() for f in futures)

    def to_wire(self) -> dict[str, Any]:
        """JSON form sent inside closure arguments."""
        return {
            "kind": "variable",
            "name": self.name,
            "shard": self.shard,
            "shape": list(self.shape),
            "dtype": self.dtype.str,
            "parts": self.parts,
            "ps": list(self.client.addresses),
            "replication": self.client.replication,
        }


class EmbeddingTable:
    """Rows keyed by int64 ids, spread over the PS shards by a hash of the id.

    `accumulate_steps` > 1 turns on delayed model updating: `push_gradients` keeps
    gradients in this process and sends their sum every that many calls.
    """

    def __init__(
        self, client: PSClient, name: str, dim: int, dtype: Any, accumulate_steps: int = 1
    ) -> None:
        self.client = client
        self.name = name
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        self.accumulate_steps = max(1, int(accumulate_steps))

    def __repr__(self) -> str:
        return f"EmbeddingTable({self.name!r}, dim={self.dim}, shards={self.client.num_shards})"

    def lookup_async(self, ids: np.ndarray, unique: bool = False) -> PendingRows:
        """Start pulling rows of `ids` (flattened); overlap local work, then `.result()`."""
        return self.client.pull_rows_async(
            self.name, np.asarray(ids).reshape(-1), self.dim, self.dtype, unique=unique
        )

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Rows for `ids` (any shape) as an array of shape ids.shape + (dim,)."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = self.client.pull_rows(self.name, ids.reshape(-1), self.dim, self.dtype)
        return rows.reshape((*ids.shape, self.dim))

    def push_gradients_async(
        self, ids: np.ndarray, grads: np.ndarray, unique: bool = False
    ) -> PendingPush | None:
        """Start sending row gradients (duplicates summed here); None while accumulating."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        grads = np.asarray(grads).reshape(len(ids), self.dim)
        if self.accumulate_steps > 1:
            return self.client.accumulate_rows(self.name, ids, grads, self.accumulate_steps)
        return self.client.push_rows_async(self.name, ids, grads, unique=unique)

    def push_gradients(self, ids: np.ndarray, grads: np.ndarray) -> None:
        """Send row gradients; duplicate ids are summed before they leave this process."""
        pending = self.push_gradients_async(ids, grads)
        if pending is not None:
            pending.result()

    def to_wire(self) -> dict[str, Any]:
        """JSON form sent inside closure arguments."""
        return {
            "kind": "table",
            "name": self.name,
            "dim": self.dim,
            "dtype": self.dtype.str,
            "accumulate_steps": self.accumulate_steps,
            "ps": list(self.client.addresses),
            "replication": self.client.replication,
        }


def handle_from_wire(data: dict[str, Any], client: PSClient) -> Variable | EmbeddingTable:
    """Rebuild a Variable or EmbeddingTable handle bound to `client`."""
    if data["kind"] == "variable":
        return Variable(
            client,
            data["name"],
            int(data["shard"]),
            data["shape"],
            data["dtype"],
            data.get("parts"),
        )
    if data["kind"] == "table":
        return EmbeddingTable(
            client,
            data["name"],
            int(data["dim"]),
            data["dtype"],
            int(data.get("accumulate_steps", 1)),
        )
    raise ValueError(f"unknown handle kind {data['kind']!r}")
