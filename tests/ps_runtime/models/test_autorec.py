"""AutoRec's hand-derived gradients against central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from ps_runtime.models.autorec import Params, init_params, loss_and_gradients, predict

EPS = 1e-6


def test_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(3)
    cols, n, hidden, l2 = 5, 7, 4, 0.3
    mask = (rng.random((cols, n)) < 0.5).astype(np.float64)
    x = mask * rng.integers(1, 6, (cols, n))
    p = Params(*(a.astype(np.float64) for a in init_params(n, hidden, seed=1)))
    p = p._replace(b=rng.normal(0, 0.2, hidden), c=rng.normal(0, 0.2, n))
    _, grads = loss_and_gradients(x, mask, p, l2)
    for param, grad in zip(p, grads, strict=True):
        numeric = np.zeros_like(param)
        for idx in np.ndindex(param.shape):
            old = param[idx]
            param[idx] = old + EPS
            up = loss_and_gradients(x, mask, p, l2)[0]
            param[idx] = old - EPS
            down = loss_and_gradients(x, mask, p, l2)[0]
            param[idx] = old
            numeric[idx] = (up - down) / (2 * EPS)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_unobserved_entries_do_not_count() -> None:
    rng = np.random.default_rng(0)
    p = init_params(6, 3, seed=0)
    mask = np.ones((4, 6), np.float32)
    mask[:, 0] = 0.0
    x = mask * rng.integers(1, 6, (4, 6)).astype(np.float32)
    loss, grads = loss_and_gradients(x, mask, p, 0.0)
    y = predict(x, p)
    assert loss == pytest.approx(float(np.sum(((y - x)[:, 1:]) ** 2)), rel=1e-5)
    assert grads.c[0] == 0.0  # no rating in input 0: its output bias gets no gradient
    np.testing.assert_array_equal(grads.v[:, 0], 0.0)
