"""Numerically stable logistic loss pieces shared by the click-through models."""

from __future__ import annotations

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def logistic_loss(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean sigmoid cross-entropy: softplus(z) - y·z."""
    return float(np.mean(np.logaddexp(0.0, logits) - labels * logits))


def logistic_loss_grad(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """d(mean loss)/d logits."""
    grad: np.ndarray = (sigmoid(logits) - labels) / len(labels)
    return grad
