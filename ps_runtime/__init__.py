"""TrainHub parameter-server runtime (numpy + gRPC). Importing this package is cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ps_runtime.reporting import report

if TYPE_CHECKING:
    from ps_runtime.closures import per_worker
    from ps_runtime.cluster import ClusterResolver, LocalCluster
    from ps_runtime.coordinator import ClosureError, ClusterCoordinator, RemoteValue
    from ps_runtime.optimizers import SGD, Adagrad
    from ps_runtime.strategy import ParameterServerStrategy, create_table, create_variable

# Heavier names (grpc, numpy) load on first attribute access.
_LAZY = {
    "ClusterResolver": "ps_runtime.cluster",
    "LocalCluster": "ps_runtime.cluster",
    "ClusterCoordinator": "ps_runtime.coordinator",
    "RemoteValue": "ps_runtime.coordinator",
    "ClosureError": "ps_runtime.coordinator",
    "ParameterServerStrategy": "ps_runtime.strategy",
    "create_variable": "ps_runtime.strategy",
    "create_table": "ps_runtime.strategy",
    "SGD": "ps_runtime.optimizers",
    "Adagrad": "ps_runtime.optimizers",
    "per_worker": "ps_runtime.closures",
}

__all__ = [
    "SGD",
    "Adagrad",
    "ClosureError",
    "ClusterCoordinator",
    "ClusterResolver",
    "LocalCluster",
    "ParameterServerStrategy",
    "RemoteValue",
    "create_table",
    "create_variable",
    "per_worker",
    "report",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ps_runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
