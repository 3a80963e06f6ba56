"""Optimizer math against plain numpy references, dense and sparse (touched rows only)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ps_runtime.server.optimizers import (
    FTRL,
    SGD,
    Adagrad,
    Adam,
    Momentum,
    Optimizer,
    make_optimizer,
    put_rows,
    take_rows,
)

State = dict[str, np.ndarray]


# Reference rules, written out independently of ps_runtime.server.optimizers (float64).
def ref_sgd(w: np.ndarray, g: np.ndarray, s: State, t: np.ndarray, lr: float = 0.1) -> None:
    w -= lr * g


def ref_momentum(
    w: np.ndarray, g: np.ndarray, s: State, t: np.ndarray, lr: float = 0.1, mu: float = 0.9
) -> None:
    s["m"] = mu * s.get("m", np.zeros_like(w)) + g
    w -= lr * s["m"]


def ref_adagrad(w: np.ndarray, g: np.ndarray, s: State, t: np.ndarray, lr: float = 0.1) -> None:
    s["acc"] = s.get("acc", np.full_like(w, 1e-6)) + g**2
    w -= lr * g / (np.sqrt(s["acc"]) + 1e-7)


def ref_adam(w: np.ndarray, g: np.ndarray, s: State, t: np.ndarray, lr: float = 0.1) -> None:
    b1, b2, eps = 0.9, 0.999, 1e-7
    s["m"] = b1 * s.get("m", np.zeros_like(w)) + (1 - b1) * g
    s["v"] = b2 * s.get("v", np.zeros_like(w)) + (1 - b2) * g * g
    m_hat = s["m"] / (1 - b1**t)
    v_hat = s["v"] / (1 - b2**t)
    # The epsilon-hat form TF uses: lr_t * m / (sqrt(v) + eps).
    w -= lr * m_hat / (np.sqrt(v_hat) + eps * np.sqrt(1 / (1 - b2**t)))


def ref_ftrl(
    w: np.ndarray,
    g: np.ndarray,
    s: State,
    t: np.ndarray,
    lr: float = 0.1,
    l1: float = 0.01,
    l2: float = 0.02,
) -> None:
    n = s.get("n", np.full_like(w, 0.1))
    z = s.get("z", np.zeros_like(w))
    n_new = n + g * g
    z = z + g - (np.sqrt(n_new) - np.sqrt(n)) / lr * w
    w[...] = np.where(np.abs(z) > l1, -(z - np.sign(z) * l1) / (np.sqrt(n_new) / lr + 2 * l2), 0)
    s["n"], s["z"] = n_new, z


CASES: list[tuple[Callable[[], Optimizer], Callable[..., None]]] = [
    (lambda: SGD(learning_rate=0.1), ref_sgd),
    (lambda: Momentum(learning_rate=0.1, momentum=0.9), ref_momentum),
    (lambda: Adagrad(learning_rate=0.1), ref_adagrad),
    (lambda: Adam(learning_rate=0.1), ref_adam),
    (lambda: FTRL(learning_rate=0.1, l1=0.01, l2=0.02), ref_ftrl),
]
IDS = ["sgd", "momentum", "adagrad", "adam", "ftrl"]


@pytest.mark.parametrize(("make", "ref"), CASES, ids=IDS)
@pytest.mark.parametrize("seed", range(5))
def test_dense_update_matches_reference(
    make: Callable[[], Optimizer], ref: Callable[..., None], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    opt = make()
    shape = tuple(rng.integers(1, 6, size=rng.integers(1, 3)))
    w = rng.normal(size=shape)
    slots = opt.init_slots(w.shape, w.dtype)
    ref_w, ref_state = w.copy(), dict[str, np.ndarray]()
    for step in range(1, 6):
        g = rng.normal(size=shape) * rng.choice([0.01, 1.0, 10.0])
        opt.apply_dense(w, g, slots, step)
        ref(ref_w, g, ref_state, np.float64(step))
    np.testing.assert_allclose(w, ref_w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("make", "ref"), CASES, ids=IDS)
@pytest.mark.parametrize("seed", range(5))
def test_sparse_update_matches_reference_on_touched_rows(
    make: Callable[[], Optimizer], ref: Callable[..., None], seed: int
) -> None:
    """Lazy semantics: untouched rows and their slots stay; per-row step counts."""
    rng = np.random.default_rng(100 + seed)
    opt = make()
    rows_total, dim = 12, 3
    w = rng.normal(size=(rows_total, dim))
    slots = {**opt.init_slots(w.shape, w.dtype), **opt.init_row_slots(rows_total)}
    ref_w = w.copy()
    ref_states: list[State] = [{} for _ in range(rows_total)]
    ref_steps = np.zeros(rows_total, dtype=np.int64)
    for step in range(1, 8):
        rows = rng.choice(rows_total, size=rng.integers(1, rows_total), replace=False)
        g = rng.normal(size=(len(rows), dim))
        opt.apply_rows(w, rows, g, slots, step)
        for r, grow in zip(rows, g, strict=True):
            ref_steps[r] += 1
            row = ref_w[r]
            ref(row, grow, ref_states[r], np.float64(ref_steps[r]))
    np.testing.assert_allclose(w, ref_w, rtol=1e-6, atol=1e-6)
    if "step" in slots:
        np.testing.assert_array_equal(slots["step"], ref_steps)


def test_learning_rate_change_takes_effect() -> None:
    opt = SGD(learning_rate=0.1)
    w = np.ones(2)
    opt.set_params(learning_rate=1.0)
    opt.apply_dense(w, np.ones(2), {}, 1)
    np.testing.assert_allclose(w, [0.0, 0.0])
    with pytest.raises(ValueError, match="allowed"):
        opt.set_params(beta1=0.5)


def test_make_optimizer_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        make_optimizer("adamw")
    with pytest.raises(ValueError, match="allowed"):
        make_optimizer("sgd", {"momentum": 0.9})
    assert make_optimizer("Adagrad", {"learning_rate": 0.1}).params["learning_rate"] == 0.1
    assert sorted(["sgd", "momentum", "adagrad", "adam", "ftrl"]) == sorted(
        make_optimizer(n).name for n in ["sgd", "momentum", "adagrad", "adam", "ftrl"]
    )


@pytest.mark.parametrize("layout", ["c-ordered", "strided columns", "fortran", "one column", "1-d"])
def test_take_and_put_rows_match_fancy_indexing(layout: str) -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(size=(50, 8)).astype(np.float32)
    a = {
        "c-ordered": base,
        "strided columns": base[:, ::2],
        "fortran": np.asfortranarray(base),
        "one column": base[:, :1].copy(),
        "1-d": base[:, 0].copy(),
    }[layout]
    rows = np.array([31, 2, 49, 0, 17], dtype=np.int64)  # unsorted, both ends
    np.testing.assert_array_equal(take_rows(a, rows), a[rows])
    values = rng.normal(size=a[rows].shape)  # float64: stored as a's dtype
    expected = a.copy()
    expected[rows] = values
    put_rows(a, rows, values)
    np.testing.assert_array_equal(a, expected)
