"""Biased matrix factorization: ŷ = μ + b_u + b_i + <p_u, q_i>.

Each user (item) row on the PS holds [p, b] (dim + 1 floats), so one pull and one push
per table per batch serve both the factors and the bias. Loss per batch of B ratings:
mean (ŷ - r)² + λ·mean(‖p_u‖² + ‖q_i‖²) + λ_b·mean(b_u² + b_i²).
"""

from __future__ import annotations

import numpy as np


def predict(users: np.ndarray, items: np.ndarray, mean: float) -> np.ndarray:
    """ŷ from gathered rows [p, b] of users and items."""
    yhat: np.ndarray = (
        mean + users[:, -1] + items[:, -1] + np.einsum("ij,ij->i", users[:, :-1], items[:, :-1])
    )
    return yhat


def loss_and_gradients(
    u: np.ndarray, v: np.ndarray, r: np.ndarray, mean: float, l2: float, bias_l2: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """Batch loss and its gradients with respect to each gathered user and item row."""
    n = len(r)
    err = predict(u, v, mean) - r
    loss = (
        np.mean(err * err)
        + l2 * np.mean(np.sum(u[:, :-1] ** 2 + v[:, :-1] ** 2, axis=1))
        + bias_l2 * np.mean(u[:, -1] ** 2 + v[:, -1] ** 2)
    )
    scale = 2.0 / n
    gu = np.empty_like(u)
    gv = np.empty_like(v)
    gu[:, :-1] = scale * (err[:, None] * v[:, :-1] + l2 * u[:, :-1])
    gv[:, :-1] = scale * (err[:, None] * u[:, :-1] + l2 * v[:, :-1])
    gu[:, -1] = scale * (err + bias_l2 * u[:, -1])
    gv[:, -1] = scale * (err + bias_l2 * v[:, -1])
    return float(loss), gu, gv
