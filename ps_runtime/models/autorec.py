"""AutoRec (Sedhain et al., 2015): an autoencoder over one column of the rating matrix.

Item-based (I-AutoRec): each item's ratings by all users, x ∈ R^n with zeros where
unrated, go through one sigmoid hidden layer and back: ŷ = sigmoid(x W + b) V + c, with
W: [n, hidden], V: [hidden, n]. The same code is user-based when the matrix is transposed.
Loss over a batch of columns X (rows of the batch are items), observed mask M:
Σ M ⊙ (ŷ - X)² + (λ/2)(‖W‖² + ‖V‖²); unobserved entries neither count in the loss nor
feed anything but zeros into the encoder, and ŷ at an unobserved entry is the prediction.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ps_runtime.models.losses import sigmoid


class Params(NamedTuple):
    """The four dense variables (pulled from the PS as whole arrays)."""

    w: np.ndarray  # [n, hidden] encoder
    b: np.ndarray  # [hidden]
    v: np.ndarray  # [hidden, n] decoder
    c: np.ndarray  # [n]


def init_params(n: int, hidden: int, seed: int) -> Params:
    """Glorot-style normal weights (std 1/√fan_in) and zero biases, as float32."""
    rng = np.random.default_rng(seed)
    return Params(
        (rng.standard_normal((n, hidden)) / np.sqrt(n)).astype(np.float32),
        np.zeros(hidden, np.float32),
        (rng.standard_normal((hidden, n)) / np.sqrt(hidden)).astype(np.float32),
        np.zeros(n, np.float32),
    )


def forward(x: np.ndarray, p: Params) -> tuple[np.ndarray, np.ndarray]:
    """Hidden activations sigmoid(xW + b) and reconstructions ŷ for a batch of columns `x`."""
    h = sigmoid(x @ p.w + p.b)
    y: np.ndarray = h @ p.v + p.c
    return h, y


def predict(x: np.ndarray, p: Params) -> np.ndarray:
    """Reconstructions ŷ (unclipped) for a batch of columns `x`."""
    return forward(x, p)[1]


def loss_and_gradients(
    x: np.ndarray, mask: np.ndarray, p: Params, l2: float
) -> tuple[float, Params]:
    """Batch loss and its gradient with respect to every parameter.

    `x` holds the observed ratings (0 elsewhere), `mask` 1 where observed. `l2` is λ for
    this batch: a caller splitting the columns into batches scales it by the batch share.
    """
    h, y = forward(x, p)
    err = (y - x) * mask
    loss = float(np.sum(err * err) + 0.5 * l2 * (np.sum(p.w * p.w) + np.sum(p.v * p.v)))
    gy = 2.0 * err
    gv = h.T @ gy + l2 * p.v
    gc = gy.sum(axis=0)
    gz = (gy @ p.v.T) * h * (1.0 - h)
    gw = x.T @ gz + l2 * p.w
    gb = gz.sum(axis=0)
    return loss, Params(gw, gb, gv, gc)
