"""Handles to variables and embedding tables that live on the PS shards.

Handles are cheap to send to workers: they travel as JSON (name, shard, PS
addresses) and are rebound on the worker to that worker's own PS client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ps_runtime.ps_client import PSClient


class Variable:
    """A dense variable stored whole on one PS shard."""

    def __init__(self, client: PSClient, name: str, shard: int, shape: Sequence[int],
                 dtype: Any) -> None:
        self.client = client
        self.name = name
        self.shard = shard
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    def __repr__(self) -> str:
        return f"Variable({self.name!r}, shape={self.shape}, dtype={self.dtype}, ps={self.shard})"

    def read(self) -> np.ndarray:
        """Pull the current value (a read-only array)."""
        return self.client.pull_dense(self.shard, self.name)

    def push_gradient(self, grad: np.ndarray) -> int:
        """Send a gradient; the PS applies the variable's optimizer. Returns the version."""
        return self.client.push_dense(self.shard, self.name, np.asarray(grad))

    def to_wire(self) -> dict[str, Any]:
        """JSON form sent inside closure arguments."""
        return {"kind": "variable", "name": self.name, "shard": self.shard,
                "shape": list(self.shape), "dtype": self.dtype.str,
                "ps": list(self.client.addresses)}


class EmbeddingTable:
    """Rows keyed by int64 ids, spread over the PS shards by id modulo shard count."""

    def __init__(self, client: PSClient, name: str, dim: int, dtype: Any) -> None:
        self.client = client
        self.name = name
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)

    def __repr__(self) -> str:
        return f"EmbeddingTable({self.name!r}, dim={self.dim}, shards={self.client.num_shards})"

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Rows for `ids` (any shape) as an array of shape ids.shape + (dim,)."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = self.client.pull_rows(self.name, ids.reshape(-1), self.dim, self.dtype)
        return rows.reshape((*ids.shape, self.dim))

    def push_gradients(self, ids: np.ndarray, grads: np.ndarray) -> None:
        """Send row gradients; duplicate ids are summed before they leave this process."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        self.client.push_rows(self.name, ids, np.asarray(grads).reshape(len(ids), self.dim))

    def to_wire(self) -> dict[str, Any]:
        """JSON form sent inside closure arguments."""
        return {"kind": "table", "name": self.name, "dim": self.dim, "dtype": self.dtype.str,
                "ps": list(self.client.addresses)}


def handle_from_wire(data: dict[str, Any], client: PSClient) -> Variable | EmbeddingTable:
    """Rebuild a Variable or EmbeddingTable handle bound to `client`."""
    if data["kind"] == "variable":
        return Variable(client, data["name"], int(data["shard"]), data["shape"], data["dtype"])
    if data["kind"] == "table":
        return EmbeddingTable(client, data["name"], int(data["dim"]), data["dtype"])
    raise ValueError(f"unknown handle kind {data['kind']!r}")
