"""Hand-derived gradients of the built-in models against central finite differences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ps_runtime.models import logistic, wide_deep
from ps_runtime.models.mf import loss_and_gradients as mf_loss_and_gradients

EPS = 1e-6


def numeric_grad(f: Callable[[], float], x: np.ndarray) -> np.ndarray:
    """Central differences of f with respect to every element of x (perturbed in place)."""
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"], op_flags=[["readwrite"]])  # type: ignore[list-item]
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + EPS
        up = f()
        x[i] = old - EPS
        down = f()
        x[i] = old
        grad[i] = (up - down) / (2 * EPS)
    return grad


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(42)


def test_logistic_regression_gradients(rng: np.random.Generator) -> None:
    w = rng.normal(0, 0.5, (6, 4, 1))
    y = rng.integers(0, 2, 6).astype(np.float64)
    bias = np.array([0.3])
    loss, gw, gb = logistic.loss_and_gradients(w, float(bias[0]), y)
    assert loss == pytest.approx(logistic.loss_and_gradients(w, float(bias[0]), y)[0])
    np.testing.assert_allclose(
        gw, numeric_grad(lambda: logistic.loss_and_gradients(w, float(bias[0]), y)[0], w), atol=1e-7
    )
    np.testing.assert_allclose(
        gb,
        numeric_grad(lambda: logistic.loss_and_gradients(w, float(bias[0]), y)[0], bias)[0],
        atol=1e-7,
    )


def test_wide_and_deep_gradients(rng: np.random.Generator) -> None:
    batch, fields, dim, hidden = 5, 3, 4, 6
    wide = rng.normal(0, 0.3, (batch, fields, 1))
    emb = rng.normal(0, 0.5, (batch, fields, dim))
    mlp = wide_deep.MLP(
        w1=rng.normal(0, 0.4, (fields * dim, hidden)),
        b1=rng.normal(0, 0.1, hidden),
        w2=rng.normal(0, 0.4, hidden),
        b2=np.array([0.1]),
    )
    y = rng.integers(0, 2, batch).astype(np.float64)

    def loss() -> float:
        return wide_deep.loss_and_gradients(wide, emb, mlp, y)[0]

    _, grads = wide_deep.loss_and_gradients(wide, emb, mlp, y)
    np.testing.assert_allclose(grads.wide, numeric_grad(loss, wide), atol=1e-7)
    np.testing.assert_allclose(grads.embeddings, numeric_grad(loss, emb), atol=1e-7)
    for name in wide_deep.MLP.NAMES:
        np.testing.assert_allclose(
            getattr(grads.mlp, name),
            numeric_grad(loss, getattr(mlp, name)),
            atol=1e-7,
            err_msg=name,
        )


def test_matrix_factorization_gradients(rng: np.random.Generator) -> None:
    u = rng.normal(0, 0.3, (7, 5))
    v = rng.normal(0, 0.3, (7, 5))
    r = rng.integers(1, 6, 7).astype(np.float64)

    def loss() -> float:
        return mf_loss_and_gradients(u, v, r, 3.5, 0.05, 0.02)[0]

    _, gu, gv = mf_loss_and_gradients(u, v, r, 3.5, 0.05, 0.02)
    np.testing.assert_allclose(gu, numeric_grad(loss, u), atol=1e-7)
    np.testing.assert_allclose(gv, numeric_grad(loss, v), atol=1e-7)


def test_logistic_loss_is_stable_for_large_logits() -> None:
    from ps_runtime.models.losses import logistic_loss, sigmoid

    z = np.array([-800.0, 800.0])
    assert np.isfinite(logistic_loss(z, np.array([1.0, 0.0])))
    np.testing.assert_allclose(sigmoid(z), [0.0, 1.0])


def test_auc_matches_pairwise_definition(rng: np.random.Generator) -> None:
    from ps_runtime.examples.ctr import auc

    labels = rng.integers(0, 2, 60).astype(float)
    scores = rng.integers(0, 5, 60).astype(float)  # many ties
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert auc(labels, scores) == pytest.approx(pairs / (len(pos) * len(neg)))


def test_ctr_wide_and_deep_learns_what_logistic_regression_cannot() -> None:
    from ps_runtime.examples.ctr import train

    common: dict[str, Any] = {
        "steps": 150,
        "examples": 40_000,
        "eval_every": 150,
        "report_every": 50,
    }
    linear = train(model="logistic", **common)
    deep = train(model="wide_deep", **common)
    assert linear["test_auc"] > 0.6
    assert deep["test_auc"] > linear["test_auc"] + 0.02, (linear, deep)
