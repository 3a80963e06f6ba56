"""Embedding tables: the id index, get-or-create, admission, eviction and row budgets."""

from __future__ import annotations

import numpy as np
import pytest

from ps_runtime.server.id_index import IdIndex
from ps_runtime.server.optimizers import SGD, Adam
from ps_runtime.server.store import make_spec
from ps_runtime.server.tables import Lifecycle, StoredTable


def _table(lifecycle: Lifecycle | None = None, optimizer: str = "sgd") -> StoredTable:
    spec = make_spec(
        "table", (4,), "float32", "uniform", {"seed": 7}, optimizer, {"learning_rate": 0.5}
    )
    opt = SGD(learning_rate=0.5) if optimizer == "sgd" else Adam(learning_rate=0.5)
    return StoredTable("t", spec, opt, lifecycle or Lifecycle())


@pytest.mark.parametrize("seed", range(3))
def test_id_index_matches_a_dict(seed: int) -> None:
    rng = np.random.default_rng(seed)
    index, ref = IdIndex(), dict[int, int]()
    for _ in range(40):
        ids = np.unique(rng.integers(-(10**15), 10**15, size=rng.integers(1, 3000)))
        ids = ids[index.get(ids) < 0]
        values = rng.integers(0, 2**31 - 1, size=len(ids))
        index.insert(ids, values)
        ref.update(zip(ids.tolist(), values.tolist(), strict=True))
        gone = np.array(list(ref)[: rng.integers(0, 200)], dtype=np.int64)
        index.delete(gone)
        for g in gone.tolist():
            del ref[g]
    keys = np.array(list(ref), dtype=np.int64)
    np.testing.assert_array_equal(index.get(keys), [ref[k] for k in keys.tolist()])
    assert index.size == len(ref)
    assert (index.get(np.arange(10**16, 10**16 + 100)) == -1).all()


def test_rows_are_created_on_first_pull_with_the_initializer() -> None:
    t = _table()
    ids = np.array([5, 10**12, -3])
    first = t.pull(ids)
    assert t.size == 3
    np.testing.assert_array_equal(first, t.initial_rows(ids))
    np.testing.assert_array_equal(t.pull(ids[::-1]), first[::-1])
    t.push(np.array([5]), np.ones((1, 4), np.float32))
    np.testing.assert_allclose(t.pull(np.array([5]))[0], first[0] - 0.5)


def test_admission_after_k_pulls_drops_earlier_gradients() -> None:
    t = _table(Lifecycle(admit_after=3))
    ids = np.array([1, 2])
    initial = t.initial_rows(ids)
    for _ in range(2):
        np.testing.assert_array_equal(t.pull(ids[:1]), initial[:1])
        t.push(ids[:1], np.ones((1, 4), np.float32))  # dropped: not admitted yet
    assert t.size == 0 and t.pending_admission == 1 and t.counters.dropped == 2
    np.testing.assert_array_equal(t.pull(ids), initial)  # third sighting of id 1
    assert t.size == 1 and t.ids().tolist() == [1]
    t.push(ids[:1], np.ones((1, 4), np.float32))
    np.testing.assert_allclose(t.pull(ids[:1]), initial[:1] - 0.5)


def test_eviction_of_rows_not_touched_for_t_steps() -> None:
    t = _table(Lifecycle(evict_after_steps=4))
    t.pull(np.arange(10))
    for _ in range(8):
        t.push(np.array([0, 1]), np.ones((2, 4), np.float32))
    assert sorted(t.ids().tolist()) == [0, 1]
    assert t.counters.evicted == 8
    # An evicted row comes back with its initial value.
    np.testing.assert_array_equal(t.pull(np.array([5])), t.initial_rows(np.array([5])))


def test_row_budget_evicts_least_recently_used_and_keeps_values() -> None:
    t = _table(Lifecycle(max_rows=100), optimizer="adam")
    t.pull(np.arange(100))
    t.push(np.arange(50), np.ones((50, 4), np.float32))  # rows 0..49 are recent
    trained = t.pull(np.arange(50)).copy()
    t.pull(np.arange(1000, 1010))  # needs 10 rows: evicts old, untouched ones
    assert t.size <= 100
    kept = set(t.ids().tolist())
    assert set(range(50)) <= kept and set(range(1000, 1010)) <= kept
    np.testing.assert_array_equal(t.pull(np.arange(50)), trained)  # moved rows intact
    assert t.slots["step"][: t.size].max() == 1


def test_a_stream_of_distinct_ids_stays_within_the_budget() -> None:
    t = _table(Lifecycle(max_rows=5000))
    rng = np.random.default_rng(0)
    for start in range(0, 200_000, 4096):
        ids = np.arange(start, start + 4096) * 7919
        t.pull(ids)
        t.push(ids[:100], rng.normal(size=(100, 4)).astype(np.float32))
        assert t.size <= 5000 and t.capacity <= 5000
    assert t.counters.evicted >= 200_000 - 5000
    with pytest.raises(ValueError, match="row budget"):
        t.pull(np.arange(10**9, 10**9 + 6000))
