"""ParameterServerStrategy: variables created in its scope live on the PS shards."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ps_runtime.cluster import ClusterResolver
from ps_runtime.optimizers import SGD, Optimizer
from ps_runtime.ps_client import PSClient
from ps_runtime.variables import EmbeddingTable, Variable

InitializerArg = str | tuple[str, Mapping[str, float]]
_current: contextvars.ContextVar[ParameterServerStrategy | None] = contextvars.ContextVar(
    "ps_strategy", default=None)


def _initializer(arg: InitializerArg) -> tuple[str, Mapping[str, float]]:
    if isinstance(arg, str):
        return arg, {}
    name, params = arg
    return name, dict(params)


class ParameterServerStrategy:
    """Places variables on PS shards: dense ones whole, round-robin; tables row-sharded.

    Args:
        cluster_resolver: where the PS shards and workers are.
        optimizer: default optimizer for variables that do not name one (SGD 0.01).
    """

    def __init__(self, cluster_resolver: ClusterResolver,
                 optimizer: Optimizer | None = None) -> None:
        self.cluster_resolver = cluster_resolver
        self.default_optimizer = optimizer or SGD()
        self.ps_client = PSClient(cluster_resolver.ps, cluster_resolver.token)
        self._lock = threading.Lock()  # guards the round-robin counter
        self._next_shard = itertools.count()

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

    def create_variable(self, name: str, shape: Sequence[int] | None = None,
                        dtype: Any = "float32", initializer: InitializerArg = "zeros",
                        optimizer: Optimizer | None = None,
                        initial_value: Any = None) -> Variable:
        """Create (or attach to an identical existing) dense variable on the next shard."""
        value = None if initial_value is None else np.asarray(initial_value, dtype=dtype)
        if shape is None:
            if value is None:
                raise ValueError(f"variable {name!r} needs a shape or an initial_value")
            shape = value.shape
        with self._lock:
            shard = next(self._next_shard) % self.num_ps
        opt = optimizer or self.default_optimizer
        self.ps_client.create_variable(shard, name, shape, dtype, _initializer(initializer),
                                       opt.spec(), value)
        return Variable(self.ps_client, name, shard, shape, dtype)

    def create_table(self, name: str, dim: int, dtype: Any = "float32",
                     initializer: InitializerArg = ("normal", {"stddev": 0.01}),
                     optimizer: Optimizer | None = None) -> EmbeddingTable:
        """Create an embedding table whose rows are spread over all shards by id."""
        opt = optimizer or self.default_optimizer
        self.ps_client.create_table(name, dim, dtype, _initializer(initializer), opt.spec())
        return EmbeddingTable(self.ps_client, name, dim, dtype)

    def save_checkpoint(self, name: str) -> list[str]:
        """Save every PS shard under checkpoint `name`; needs a checkpoint dir on the PS."""
        return self.ps_client.save_checkpoint(name)

    def restore_checkpoint(self, name: str) -> list[str]:
        """Restore every PS shard from checkpoint `name`."""
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
        raise RuntimeError("no ParameterServerStrategy scope is active; create variables "
                           "inside `with strategy.scope():`")
    return strategy


def create_variable(name: str, shape: Sequence[int] | None = None, **kwargs: Any) -> Variable:
    """Create a dense variable with the strategy of the active scope."""
    return current_strategy().create_variable(name, shape, **kwargs)


def create_table(name: str, dim: int, **kwargs: Any) -> EmbeddingTable:
    """Create an embedding table with the strategy of the active scope."""
    return current_strategy().create_table(name, dim, **kwargs)
