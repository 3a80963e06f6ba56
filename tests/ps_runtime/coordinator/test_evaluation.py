"""Inline evaluation counts every eval shard exactly once; the sidecar loop evaluates each
committed checkpoint once, in step order."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ps_runtime.coordinator.cluster import ClusterResolver, LocalCluster
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
from ps_runtime.coordinator.evaluation import EvaluationLoop, evaluate_inline
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.examples import movielens
from ps_runtime.server.optimizers import Adagrad
from tests.ps_runtime.coordinator.test_coordinator_elastic import TOKEN, Tasks


def test_inline_evaluation_counts_each_shard_once_when_a_worker_dies(tmp_path: Path) -> None:
    tasks = Tasks()
    try:
        ps = tasks.start("ps")
        workers = [tasks.start("worker", i) for i in range(2)]
        resolver = ClusterResolver(ps=[ps], workers=workers, token=TOKEN)
        resolver.wait_until_healthy(timeout=60)
        strategy = ParameterServerStrategy(resolver)
        coordinator = ClusterCoordinator(strategy)
        dataset = movielens.load_dataset(None, None, seed=1)
        with strategy.scope():
            users = strategy.create_table("mf/users", 9)
            items = strategy.create_table("mf/items", 9)
        data = coordinator.create_per_worker_dataset(movielens.load_dataset, None, None, 1)
        args = (data, users, items, 3.5)
        clean = evaluate_inline(coordinator, movielens.eval_shard, 40, args)
        values = [coordinator.schedule(movielens.eval_shard, (*args, s, 40)) for s in range(40)]
        tasks.kill(workers[1])
        coordinator.join(timeout=120)
        disturbed = evaluate_inline(coordinator, movielens.eval_shard, 40, args)
        assert all(v.done() for v in values)
        for total in (clean, disturbed):
            assert total["count"] == len(dataset.test)
        assert math.isclose(disturbed["sse"], clean["sse"], rel_tol=1e-6)
        coordinator.shutdown()
        strategy.close()
    finally:
        tasks.stop_all()


def test_evaluation_loop_evaluates_each_checkpoint_once(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    with LocalCluster(num_ps=1, num_workers=1, checkpoint_dir=ckpt) as cluster:
        movielens.train(
            epochs=3,
            checkpoint_every_seconds=0,
            report_every=10**6,
            checkpoint_dir=ckpt,
            cluster=cluster.resolver,
        )
    reports: list[dict[str, float]] = []
    dataset = movielens.load_dataset(None, None, seed=0)
    mean = float(np.mean(dataset.train.ratings))

    def build(strategy: ParameterServerStrategy) -> tuple[object, object]:
        return (
            strategy.create_table("mf/users", 33, optimizer=Adagrad()),
            strategy.create_table("mf/items", 33, optimizer=Adagrad()),
        )

    def rmse(tables: tuple[object, object]) -> dict[str, float]:
        return {"rmse": movielens.evaluate(dataset, tables[0], tables[1], mean)}  # type: ignore[arg-type]

    loop = EvaluationLoop(ckpt, build, rmse, report=lambda **kw: reports.append(kw))
    first = loop.run_once()
    steps = [step for step, _ in first]
    assert steps == sorted(steps) and len(steps) == 3
    assert [r["step"] for r in reports] == steps
    assert first[-1][1]["rmse"] < first[0][1]["rmse"]
    assert loop.run_once() == []  # nothing new: nothing evaluated twice


def test_movielens_sidecar_reports_every_checkpoint(tmp_path: Path, capsys: object) -> None:
    ckpt = str(tmp_path / "ckpt")
    result = movielens.train(
        epochs=2, checkpoint_every_seconds=0, report_every=10**6, checkpoint_dir=ckpt
    )
    last = result["steps"]
    evaluated = movielens.evaluate_checkpoints(ckpt, until_step=last, poll_seconds=0.1)
    assert evaluated == {"evaluated": [last // 2, last]}
