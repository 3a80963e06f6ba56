"""ParameterServerStrategy: variables created in its scope live on the PS shards."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ps_runtime.client.client import PSClient
from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.variables import EmbeddingTable, Variable
from ps_runtime.server.optimizers import SGD, Optimizer
from ps_runtime.shards import sharding

InitializerArg = str | tuple[str, Mapping[str, float]]
_current: contextvars.ContextVar[ParameterServerStrategy | None] = contextvars.ContextVar(
    "ps_strategy", default=None
)


def _initializer(arg: InitializerArg) -> tuple[str, Mapping[str, float]]:
    if isinstance(arg, str):
        return arg, {}
    name, params = arg
    return name, dict(params)


class ParameterServerStrategy:
    """Places variables on PS shards: tables row-sharded by id hash; dense variables
    whole or sliced along axis 0 by `variable_partitioner`, each piece on the shard
    holding the fewest bytes so far (round-robin by size).

    Args:
        cluster_resolver: where the PS shards and workers are.
        optimizer: default optimizer for variables that do not name one (SGD 0.01).
        variable_partitioner: (shape, itemsize, num_shards) -> number of parts; see
            `sharding.min_size_partitioner` (the default: parts of at least 4 MiB, at
            most one per shard), `fixed_shards_partitioner`, `whole_partitioner`.
    """

    def __init__(
        self,
        cluster_resolver: ClusterResolver,
        optimizer: Optimizer | None = None,
        variable_partitioner: sharding.Partitioner | None = None,
    ) -> None:
        self.cluster_resolver = cluster_resolver
        self.default_optimizer = optimizer or SGD()
        self.partitioner = variable_partitioner or sharding.min_size_partitioner()
        self.ps_client = PSClient(
            cluster_resolver.ps, cluster_resolver.token, replication=cluster_resolver.replication
        )
        self._lock = threading.Lock()  # guards the per-shard byte counts
        self._loads = [0] * self.ps_client.num_shards

    @property
    def num_ps(self) -> int:
        """Number of PS shards."""
        return self.ps_client.num_shards

    @contextlib.contextmanager
    def scope(self) -> Iterator[ParameterServerStrategy]:
        """Within this block, `create_variable`/`create_table` place variables on this cluster."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def create_variable(
        self,
        name: str,
        shape: Sequence[int] | None = None,
        dtype: Any = "float32",
        initializer: InitializerArg = "zeros",
        optimizer: Optimizer | None = None,
        initial_value: Any = None,
    ) -> Variable:
        """Create (or attach to an identical existing) dense variable, whole or in parts."""
        value = None if initial_value is None else np.asarray(initial_value, dtype=dtype)
        if shape is None:
            if value is None:
                raise ValueError(f"variable {name!r} needs a shape or an initial_value")
            shape = value.shape
        shape = tuple(int(s) for s in shape)
        itemsize = np.dtype(dtype).itemsize
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        num_parts = self.partitioner(shape, itemsize, self.num_ps) if shape else 1
        pieces = sharding.part_rows(shape[0], num_parts) if num_parts > 1 else [(0, 0)]
        row_bytes = nbytes // max(1, shape[0]) if shape else nbytes
        with self._lock:
            shards = sharding.place(
                [n * row_bytes if num_parts > 1 else nbytes for _, n in pieces], self._loads
            )
        opt = optimizer or self.default_optimizer
        init = _initializer(initializer)
        if num_parts == 1:
            self.ps_client.create_variable(shards[0], name, shape, dtype, init, opt.spec(), value)
            return Variable(self.ps_client, name, shards[0], shape, dtype)
        parts = [(s, off, n) for s, (off, n) in zip(shards, pieces, strict=True)]
        futures = [
            self.ps_client._pool.submit(
                self.ps_client.create_variable,
                s,
                f"{name}/part-{i}",
                (n, *shape[1:]),
                dtype,
                init,
                opt.spec(),
                None if value is None else value[off : off + n],
                (name, shape[0], off),
            )
            for i, (s, off, n) in enumerate(parts)
        ]
        for f in futures:
            f.result()
        return Variable(self.ps_client, name, shards[0], shape, dtype, parts)

    def create_table(
        self,
        name: str,
        dim: int,
        dtype: Any = "float32",
        initializer: InitializerArg = ("normal", {"stddev": 0.01}),
        optimizer: Optimizer | None = None,
        *,
        admit_after: int = 0,
        evict_after_steps: int = 0,
        max_rows_per_shard: int = 0,
        expected_rows_per_shard: int = 0,
        accumulate_steps: int = 1,
    ) -> EmbeddingTable:
        """Create an embedding table whose rows are spread over all shards by id hash.

        Rows are created on first pull (get-or-create). Online-training lifecycle:
        `admit_after` k: an id gets a row after k pulls (until then it reads as its
        initial value and its gradients are dropped); `evict_after_steps` T: rows not
        touched for T table updates are dropped; `max_rows_per_shard`: a row budget,
        least recently used rows go first. `accumulate_steps` k > 1: workers sum k
        steps of gradients locally before pushing (delayed model updating).
        """
        opt = optimizer or self.default_optimizer
        self.ps_client.create_table(
            name,
            dim,
            dtype,
            _initializer(initializer),
            opt.spec(),
            admit_after,
            evict_after_steps,
            max_rows_per_shard,
            expected_rows_per_shard,
        )
        return EmbeddingTable(self.ps_client, name, dim, dtype, accumulate_steps)

    def set_learning_rate(self, learning_rate: float, names: Sequence[str] = ()) -> int:
        """Change the learning rate of `names` (default: every variable) while training."""
        return self.ps_client.set_hyperparams({"learning_rate": learning_rate}, names)

    def save_checkpoint(self, name: str, step: int = 0, keep: int = 0) -> list[str]:
        """Save and commit checkpoint `name` on every PS shard (needs a checkpoint dir).

        `keep` > 0 keeps only the newest `keep` committed checkpoints.
        """
        return self.ps_client.save_checkpoint(name, step, keep)

    def restore_checkpoint(self, name: str = "") -> list[str]:
        """Restore every PS shard from checkpoint `name` (default: newest committed).

        Create the variables first (as at the start of training); the shard count may
        differ from the one that saved.
        """
        return self.ps_client.restore_checkpoint(name)

    def stats(self) -> list[Any]:
        """Per-shard variable statistics (StatsResponse messages)."""
        return self.ps_client.stats()

    def close(self) -> None:
        """Close the PS channels."""
        self.ps_client.close()


def current_strategy() -> ParameterServerStrategy:
    """The strategy whose scope is active, or a RuntimeError saying how to enter one."""
    strategy = _current.get()
    if strategy is None:
        raise RuntimeError(
            "no ParameterServerStrategy scope is active; create variables "
            "inside `with strategy.scope():`"
        )
    return strategy


def create_variable(name: str, shape: Sequence[int] | None = None, **kwargs: Any) -> Variable:
    """Create a dense variable with the strategy of the active scope."""
    return current_strategy().create_variable(name, shape, **kwargs)


def create_table(name: str, dim: int, **kwargs: Any) -> EmbeddingTable:
    """Create an embedding table with the strategy of the active scope."""
    return current_strategy().create_table(name, dim, **kwargs)
