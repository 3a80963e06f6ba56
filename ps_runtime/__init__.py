"""TrainHub parameter-server runtime (numpy + gRPC). Importing this package is cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ps_runtime.reporting import phase, report

if TYPE_CHECKING:
    from ps_runtime.coordinator.closures import per_worker
    from ps_runtime.coordinator.cluster import ClusterResolver, LocalCluster
    from ps_runtime.coordinator.cluster_coordinator import (
        ClosureError,
        ClusterCoordinator,
        RemoteValue,
    )
    from ps_runtime.coordinator.strategy import (
        ParameterServerStrategy,
        create_table,
        create_variable,
    )
    from ps_runtime.server.model_export import load_model
    from ps_runtime.server.optimizers import SGD, Adagrad

# Heavier names (grpc, numpy) load on first attribute access.
_LAZY = {
    "ClusterResolver": "ps_runtime.coordinator.cluster",
    "LocalCluster": "ps_runtime.coordinator.cluster",
    "ClusterCoordinator": "ps_runtime.coordinator.cluster_coordinator",
    "RemoteValue": "ps_runtime.coordinator.cluster_coordinator",
    "ClosureError": "ps_runtime.coordinator.cluster_coordinator",
    "ParameterServerStrategy": "ps_runtime.coordinator.strategy",
    "create_variable": "ps_runtime.coordinator.strategy",
    "create_table": "ps_runtime.coordinator.strategy",
    "SGD": "ps_runtime.server.optimizers",
    "Adagrad": "ps_runtime.server.optimizers",
    "per_worker": "ps_runtime.coordinator.closures",
    "load_model": "ps_runtime.server.model_export",
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
    "load_model",
    "per_worker",
    "phase",
    "report",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ps_runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
