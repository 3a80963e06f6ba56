"""Coordinator entrypoints for task-process tests (`TRAINHUB_ENTRYPOINT=tests.ps_runtime...`)."""

from __future__ import annotations

import time

from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.strategy import ParameterServerStrategy


def train_without_stop_requests(seconds: float = 120.0) -> None:
    """Holds an enabled CheckpointManager but never calls `stop_requested()`."""
    strategy = ParameterServerStrategy(ClusterResolver())
    assert CheckpointManager(strategy).enabled
    print("training", flush=True)
    time.sleep(seconds)
