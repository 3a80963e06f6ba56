"""Id de-duplication, shard placement, and sharded vs unsharded equality."""

from __future__ import annotations

import numpy as np

from ps_runtime.cluster import LocalCluster
from ps_runtime.optimizers import Adagrad
from ps_runtime.sharding import dedup_sum, split_by_shard
from ps_runtime.strategy import ParameterServerStrategy


def test_dedup_sum_sums_duplicate_ids() -> None:
    ids = np.array([7, 3, 7, 9, 3, 7])
    grads = np.arange(12, dtype=np.float64).reshape(6, 2)
    unique, summed = dedup_sum(ids, grads)
    np.testing.assert_array_equal(unique, [3, 7, 9])
    expected = np.zeros((3, 2))
    np.add.at(expected, np.searchsorted(unique, ids), grads)  # reference only
    np.testing.assert_allclose(summed, expected)


def test_dedup_sum_without_duplicates_and_empty() -> None:
    unique, summed = dedup_sum(np.array([5, 1]), np.array([[1.0], [2.0]]))
    np.testing.assert_array_equal(unique, [1, 5])
    np.testing.assert_array_equal(summed, [[2.0], [1.0]])
    unique, summed = dedup_sum(np.zeros(0, np.int64), np.zeros((0, 3)))
    assert unique.shape == (0,) and summed.shape == (0, 3)


def test_split_by_shard_partitions_by_modulo() -> None:
    ids = np.array([0, 5, 3, 8, 6, -1])
    parts = split_by_shard(ids, 3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(ids)))
    for shard, pos in enumerate(parts):
        assert all(i % 3 == shard for i in ids[pos])


def _train_table(num_ps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    with LocalCluster(num_ps=num_ps, num_workers=1) as cluster:
        strategy = ParameterServerStrategy(cluster.resolver)
        with strategy.scope():
            table = strategy.create_table(
                "emb",
                4,
                initializer=("normal", {"stddev": 0.1}),
                optimizer=Adagrad(learning_rate=0.1),
            )
            dense = [
                strategy.create_variable(
                    f"w{i}", (3,), initializer="zeros", optimizer=Adagrad(learning_rate=0.1)
                )
                for i in range(3)
            ]
        for _ in range(5):
            ids = rng.integers(0, 50, size=64)
            table.push_gradients(ids, rng.normal(size=(64, 4)))
            for v in dense:
                v.push_gradient(rng.normal(size=3))
        assert {v.shard for v in dense} == set(range(min(num_ps, 3)))
        rows = table.lookup(np.arange(60).reshape(6, 10))
        values = np.stack([v.read() for v in dense])
        strategy.close()
    return rows, values


def test_sharded_equals_unsharded() -> None:
    rows1, dense1 = _train_table(1)
    rows3, dense3 = _train_table(3)
    assert rows1.shape == (6, 10, 4)
    np.testing.assert_allclose(rows1, rows3, rtol=1e-6)
    np.testing.assert_allclose(dense1, dense3, rtol=1e-6)
