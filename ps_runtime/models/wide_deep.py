"""Wide & deep over hashed sparse features: a linear (wide) part plus embeddings and an MLP.

logit = Σ_f w[id_f] + relu(concat_f E[id_f] · W1 + b1) · w2 + b2, sigmoid cross-entropy.
The wide weights and the embeddings are PS tables; the MLP is a few dense PS variables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .losses import logistic_loss, logistic_loss_grad


@dataclass
class MLP:
    """The deep tower's dense parameters: (F·d) → H → 1."""

    w1: np.ndarray  # (F·d, H)
    b1: np.ndarray  # (H,)
    w2: np.ndarray  # (H,)
    b2: np.ndarray  # (1,)

    NAMES = ("w1", "b1", "w2", "b2")

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.w1, self.b1, self.w2, self.b2


@dataclass
class Gradients:
    wide: np.ndarray  # per gathered wide weight, shape (B, F, 1)
    embeddings: np.ndarray  # per gathered embedding row, shape (B, F, d)
    mlp: MLP


def forward(wide: np.ndarray, embeddings: np.ndarray, mlp: MLP) -> np.ndarray:
    """Logits from gathered wide weights (B, F, 1) and embeddings (B, F, d)."""
    return _forward(wide, embeddings, mlp)[0]


def _forward(
    wide: np.ndarray, embeddings: np.ndarray, mlp: MLP
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x = embeddings.reshape(len(embeddings), -1)
    pre = x @ mlp.w1 + mlp.b1
    hidden = np.maximum(pre, 0.0)
    logits = wide.reshape(len(wide), -1).sum(axis=1) + hidden @ mlp.w2 + mlp.b2[0]
    return logits, x, pre, hidden


def loss_and_gradients(
    wide: np.ndarray, embeddings: np.ndarray, mlp: MLP, labels: np.ndarray
) -> tuple[float, Gradients]:
    """Batch loss and the gradient of every input, derived by hand (backprop)."""
    logits, x, pre, hidden = _forward(wide, embeddings, mlp)
    dlogit = logistic_loss_grad(logits, labels)  # (B,)
    grad_wide = np.broadcast_to(dlogit[:, None, None], wide.shape).astype(wide.dtype)
    dhidden = dlogit[:, None] * mlp.w2[None, :]  # (B, H)
    dpre = dhidden * (pre > 0)
    grads = MLP(
        w1=(x.T @ dpre).astype(mlp.w1.dtype),
        b1=dpre.sum(axis=0).astype(mlp.b1.dtype),
        w2=(hidden.T @ dlogit).astype(mlp.w2.dtype),
        b2=np.array([dlogit.sum()], dtype=mlp.b2.dtype),
    )
    grad_embeddings = (dpre @ mlp.w1.T).reshape(embeddings.shape).astype(embeddings.dtype)
    return logistic_loss(logits, labels), Gradients(grad_wide, grad_embeddings, grads)
