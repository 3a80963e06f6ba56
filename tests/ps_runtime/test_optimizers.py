"""Optimizer math against plain numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from ps_runtime.optimizers import SGD, Adagrad, make_optimizer


def test_sgd_dense_matches_reference() -> None:
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 3))
    g = rng.normal(size=(4, 3))
    expected = w - 0.1 * g
    SGD(learning_rate=0.1).apply_dense(w, g, {}, step=1)
    np.testing.assert_allclose(w, expected)


def test_adagrad_dense_matches_reference_over_steps() -> None:
    rng = np.random.default_rng(1)
    opt = Adagrad(learning_rate=0.03, initial_accumulator=1e-6, epsilon=1e-7)
    w = rng.normal(size=(5, 2))
    slots = opt.init_slots(w.shape, w.dtype)
    ref_w, ref_acc = w.copy(), np.full_like(w, 1e-6)
    for step in range(1, 4):
        g = rng.normal(size=w.shape)
        ref_acc += g**2
        ref_w -= 0.03 * g / (np.sqrt(ref_acc) + 1e-7)
        opt.apply_dense(w, g, slots, step)
    np.testing.assert_allclose(w, ref_w)
    np.testing.assert_allclose(slots["accumulator"], ref_acc)


@pytest.mark.parametrize("opt", [SGD(learning_rate=0.5), Adagrad(learning_rate=0.2)])
def test_sparse_rows_equal_dense_update_on_touched_rows(opt: SGD | Adagrad) -> None:
    rng = np.random.default_rng(2)
    dense_w = rng.normal(size=(6, 3))
    sparse_w = dense_w.copy()
    dense_slots = opt.init_slots(dense_w.shape, dense_w.dtype)
    sparse_slots = opt.init_slots(sparse_w.shape, sparse_w.dtype)
    rows = np.array([4, 1])
    g_rows = rng.normal(size=(2, 3))
    g_dense = np.zeros_like(dense_w)
    g_dense[rows] = g_rows
    opt.apply_rows(sparse_w, rows, g_rows, sparse_slots, step=1)
    opt.apply_dense(dense_w, g_dense, dense_slots, step=1)
    np.testing.assert_allclose(sparse_w, dense_w)
    for name in opt.slot_names:
        np.testing.assert_allclose(sparse_slots[name], dense_slots[name])


def test_make_optimizer_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        make_optimizer("adamw")
    with pytest.raises(ValueError, match="allowed"):
        make_optimizer("sgd", {"momentum": 0.9})
    assert make_optimizer("Adagrad", {"learning_rate": 0.1}).params["learning_rate"] == 0.1
