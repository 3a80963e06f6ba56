"""Id de-duplication, shard placement, and sharded vs unsharded equality."""

from __future__ import annotations

import numpy as np
import pytest

from ps_runtime.coordinator.cluster import LocalCluster
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.server.optimizers import Adagrad, Adam
from ps_runtime.shards.sharding import (
    dedup,
    dedup_sum,
    fixed_shards_partitioner,
    min_size_partitioner,
    part_rows,
    place,
    shard_of_ids,
    split_by_shard,
)


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


def test_split_by_shard_partitions_by_id_hash() -> None:
    ids = np.array([0, 5, 3, 8, 6, -1])
    parts = split_by_shard(ids, 3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(ids)))
    for shard, pos in enumerate(parts):
        assert (shard_of_ids(ids[pos], 3) == shard).all()
    # Strided ids (a common id scheme) still spread evenly.
    counts = np.bincount(shard_of_ids(np.arange(0, 300_000, 3), 3), minlength=3)
    assert counts.min() > 0.9 * counts.max()


def test_dedup_gives_unique_inverse_and_sums() -> None:
    rng = np.random.default_rng(5)
    ids = rng.zipf(1.3, size=5000) % 1000
    d = dedup(ids)
    np.testing.assert_array_equal(d.unique, np.unique(ids))
    np.testing.assert_array_equal(d.unique[d.inverse], ids)
    grads = rng.normal(size=(5000, 3))
    expected = np.zeros((len(d.unique), 3))
    np.add.at(expected, d.inverse, grads)  # reference only
    np.testing.assert_allclose(d.sum(grads), expected)


def test_partitioners_and_placement() -> None:
    mib = 1 << 20
    assert min_size_partitioner(4 * mib)((16 * mib, 1), 4, 2) == 2
    assert min_size_partitioner(4 * mib)((10, 3), 4, 2) == 1
    assert fixed_shards_partitioner(3)((7, 2), 4, 2) == 3
    assert part_rows(7, 3) == [(0, 3), (3, 2), (5, 2)]
    loads = [0, 0, 0]
    assert place([10], loads) == [0]
    assert place([5], loads) == [1]
    assert place([5, 5], loads) == [2, 1]


def _train_table(num_ps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    with LocalCluster(num_ps=num_ps, num_workers=1) as cluster:
        strategy = ParameterServerStrategy(
            cluster.resolver,
            variable_partitioner=lambda shape, itemsize, n: n if shape[0] >= 7 else 1,
        )
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
            big = strategy.create_variable(
                "big",
                (7, 5),
                initializer=("normal", {"seed": 4}),
                optimizer=Adam(learning_rate=0.1),
            )
        assert len(big.parts) == (num_ps if num_ps > 1 else 0)
        for _ in range(5):
            ids = rng.integers(0, 50, size=64)
            table.push_gradients(ids, rng.normal(size=(64, 4)))
            for v in dense:
                v.push_gradient(rng.normal(size=3))
            big.push_gradient(rng.normal(size=(7, 5)))
        assert {v.shard for v in dense} == set(range(min(num_ps, 3)))
        rows = table.lookup(np.arange(60).reshape(6, 10))
        values = np.stack([v.read() for v in dense])
        whole = big.read()
        strategy.close()
    return rows, values, whole


@pytest.mark.parametrize("num_ps", [2, 3])
def test_sharded_equals_unsharded(num_ps: int) -> None:
    rows1, dense1, big1 = _train_table(1)
    rows_n, dense_n, big_n = _train_table(num_ps)
    assert rows1.shape == (6, 10, 4)
    np.testing.assert_allclose(rows1, rows_n, rtol=1e-6)
    np.testing.assert_allclose(dense1, dense_n, rtol=1e-6)
    np.testing.assert_allclose(big1, big_n, rtol=1e-6)


def test_embedding_example_data_matches_the_baseline_fingerprints() -> None:
    from ps_runtime.examples.embedding import make_data

    ids, labels = make_data()
    assert ids[0, 0].tolist() == [49961, 639979, 413555, 965422, 326866, 206087, 135603, 0]
    assert int(ids.sum()) == 2946255739386 and int(labels.sum()) == 409498


def test_embedding_step_gradients_match_finite_differences() -> None:
    from ps_runtime.examples.embedding import forward_backward

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 20, size=(6, 8))
    y = rng.integers(0, 2, size=6).astype(np.float64)
    d = dedup(ids.reshape(-1))
    rows = rng.normal(size=(len(d.unique), 16))
    head = rng.normal(size=17)
    _, g_rows, g_head = forward_backward(rows, d.inverse, head, y)
    eps = 1e-6

    def numeric(bumped_rows: np.ndarray, bumped_head: np.ndarray) -> float:
        loss = forward_backward(rows, d.inverse, head, y)[0]
        return (forward_backward(bumped_rows, d.inverse, bumped_head, y)[0] - loss) / eps

    repeated = int(np.argmax(np.bincount(d.inverse)))  # an id seen in several slots
    for r, c in [(0, 0), (len(d.unique) - 1, 5), (repeated, 9)]:
        bumped = rows.copy()
        bumped[r, c] += eps
        assert abs(numeric(bumped, head) - g_rows[r, c]) < 1e-4
    for c in (3, 16):  # a weight of w, and b
        bumped_head = head.copy()
        bumped_head[c] += eps
        assert abs(numeric(rows, bumped_head) - g_head[c]) < 1e-4


def test_embedding_unique_ids_match_a_sort() -> None:
    from ps_runtime.examples.embedding import ROWS, unique_ids

    rng = np.random.default_rng(2)
    ids = rng.zipf(1.2, size=5000) % ROWS
    ids[:3] = [ROWS - 1, 0, 0]  # both ends of the range; the first id seen once
    scratch = np.full(ROWS, -7, dtype=np.int32)
    for _ in range(2):  # the scratch left by one call does not leak into the next
        unique, inverse = unique_ids(ids, scratch)
        np.testing.assert_array_equal(unique, np.unique(ids))
        np.testing.assert_array_equal(unique[inverse], ids)
        ids = (ids[::-1] + 1) % ROWS


@pytest.mark.parametrize("low", [0, -(2**62), 2**60])
def test_dedup_with_any_int64_range(low: int) -> None:
    rng = np.random.default_rng(1)
    ids = low + rng.integers(0, 50, size=3000)
    d = dedup(ids)
    np.testing.assert_array_equal(d.unique, np.unique(ids))
    np.testing.assert_array_equal(d.unique[d.inverse], ids)
    np.testing.assert_array_equal(ids[d.order], np.sort(ids))
    grads = rng.normal(size=(3000, 2))
    expected = np.zeros((len(d.unique), 2))
    np.add.at(expected, d.inverse, grads)
    np.testing.assert_allclose(d.sum(grads), expected)
