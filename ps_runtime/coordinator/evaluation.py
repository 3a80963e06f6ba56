"""Evaluation while training: inline (scheduled on the workers) and sidecar (per checkpoint).

Inline: `evaluate_inline` schedules one closure per shard of the eval set and combines the
values they return. A shard retried after a worker failure still contributes exactly one
return value, so nothing is counted twice (unlike metrics accumulated as side effects).

Sidecar: `EvaluationLoop` watches a checkpoint directory and evaluates each newly committed
checkpoint once, in step order, on an in-process PS of its own, reporting the metrics
with the checkpoint's step.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import ps_runtime
from ps_runtime.coordinator.cluster import LocalCluster
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.server import checkpoint

log = logging.getLogger(__name__)


def sum_values(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Add per-shard dicts key by key (the usual way to combine sums and counts)."""
    total: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total


def evaluate_inline(
    coordinator: Any,
    fn: Callable[..., dict[str, float]] | str,
    num_shards: int,
    args: Sequence[Any] = (),
    combine: Callable[[Sequence[dict[str, float]]], dict[str, float]] = sum_values,
) -> dict[str, float]:
    """Run `fn(*args, shard, num_shards)` for every shard on the workers and combine them.

    Raises what the closures raise (after `join`), e.g. ClosureError or UnavailableError.
    """
    with ps_runtime.phase("evaluation"):  # not a stall, however long it takes
        values = [
            coordinator.schedule(fn, (*args, shard, num_shards)) for shard in range(num_shards)
        ]
        coordinator.join()
        return combine([v.fetch() for v in values])


class EvaluationLoop:
    """Evaluates every new committed checkpoint under `directory` exactly once.

    Args:
        directory: the training job's checkpoint root.
        build: creates the job's variables in the given strategy (as training does) and
            returns whatever `evaluate` needs (e.g. a dict of tables).
        evaluate: computes metrics from what `build` returned, after a restore.
        report: where metrics go (default `ps_runtime.report`, with the checkpoint's step).
    """

    def __init__(
        self,
        directory: str,
        build: Callable[[ParameterServerStrategy], Any],
        evaluate: Callable[[Any], dict[str, float]],
        report: Callable[..., None] = ps_runtime.report,
    ) -> None:
        self.directory = directory
        self._build = build
        self._evaluate = evaluate
        self._report = report
        self.evaluated: dict[str, int] = {}  # checkpoint name -> step

    def run_once(self) -> list[tuple[int, dict[str, float]]]:
        """Evaluate the committed checkpoints not seen yet; return (step, metrics) of each."""
        fresh = [
            (step, path)
            for step, _, path in checkpoint.committed(self.directory)
            if os.path.basename(path) not in self.evaluated
        ]
        if not fresh:
            return []
        results = []
        with (
            ps_runtime.phase("evaluation"),
            LocalCluster(num_ps=1, num_workers=1, checkpoint_dir=self.directory) as cluster,
        ):
            strategy = ParameterServerStrategy(cluster.resolver)
            try:
                with strategy.scope():
                    model = self._build(strategy)
                for step, path in fresh:
                    name = os.path.basename(path)
                    try:
                        strategy.restore_checkpoint(name)
                    except Exception as e:  # pruned by the trainer meanwhile: skip it
                        log.warning("could not restore checkpoint %s: %s", name, e)
                        continue
                    metrics = self._evaluate(model)
                    self.evaluated[name] = step
                    self._report(step=step, **metrics)
                    results.append((step, metrics))
            finally:
                strategy.close()
        return results

    def run(self, stop: threading.Event, poll_seconds: float = 10.0) -> None:
        """Evaluate new checkpoints every `poll_seconds` until `stop` is set."""
        while not stop.is_set():
            self.run_once()
            stop.wait(poll_seconds)
