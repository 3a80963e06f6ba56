"""Logistic regression over hashed sparse features.

Each example has F categorical fields hashed to ids; the weights are a PS table of dim 1:
logit = b + Σ_f w[id_f].
"""

from __future__ import annotations

import numpy as np

from .losses import logistic_loss, logistic_loss_grad


def forward(weights: np.ndarray, bias: float) -> np.ndarray:
    """Logits from the gathered weights, shape (B, F, 1) or (B, F)."""
    logits: np.ndarray = weights.reshape(len(weights), -1).sum(axis=1) + bias
    return logits


def loss_and_gradients(
    weights: np.ndarray, bias: float, labels: np.ndarray
) -> tuple[float, np.ndarray, float]:
    """Batch loss, the gradient per gathered weight (shape of `weights`) and of the bias."""
    logits = forward(weights, bias)
    dlogit = logistic_loss_grad(logits, labels)
    grad_weights = np.broadcast_to(
        dlogit.reshape((-1,) + (1,) * (weights.ndim - 1)), weights.shape
    ).astype(weights.dtype)
    return logistic_loss(logits, labels), grad_weights, float(dlogit.sum())
