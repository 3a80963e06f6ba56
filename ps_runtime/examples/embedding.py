"""Synthetic embedding-heavy logistic regression (the `embed` workload of the TF baseline).

Each example has 8 Zipf-distributed ids into a 1,000,000 x 16 table E; the model is
h = sum_j E[id_j], logit = h.w + b, sigmoid cross-entropy, plain SGD on the PS for the
touched rows of E and for the head [w, b]. One training step on a worker:

1. de-duplicate the batch's 32,768 ids (`unique_ids`: a bitmap over the id range);
2. pull the unique rows and the head at the same time (`lookup_async`, `read_async`);
3. compute the loss and the gradients in numpy, per unique row (`forward_backward`:
   the gradients of duplicate ids are summed by one `np.bincount`);
4. push rows and head at the same time.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ps_runtime.coordinator.variables import EmbeddingTable, Variable

ROWS, DIM, SLOTS = 1_000_000, 16, 8
ID_MULT = 482_711  # odd and not a multiple of 5: a bijection on [0, 10^6) that scatters hot ids


def make_data(
    batches: int = 200, batch_size: int = 4096, seed: int = 1234, zipf_a: float = 1.2
) -> tuple[np.ndarray, np.ndarray]:
    """The fixed ids [batches, batch_size, 8] (int64) and labels [batches, batch_size]."""
    rng = np.random.default_rng(seed)
    z = rng.zipf(zipf_a, size=(batches, batch_size, SLOTS))
    ids = ((z - 1) % ROWS) * ID_MULT % ROWS
    labels = rng.integers(0, 2, size=(batches, batch_size)).astype(np.float32)
    return ids.astype(np.int64), labels


class EmbedData:
    """One worker's stream: the fixed batches in its own order, reshuffled every pass."""

    def __init__(self, batches: int = 200, batch_size: int = 4096, seed: int = 1234) -> None:
        self.ids, self.labels = make_data(batches, batch_size, seed)
        self._rng = np.random.default_rng()
        self._lock = threading.Lock()  # guards _order and _next
        self._order = self._rng.permutation(len(self.ids))
        self._next = 0
        self._scratch = threading.local()  # .ids: unique_ids' int32 [ROWS] per thread

    def scratch(self) -> np.ndarray:
        """This thread's scratch array for `unique_ids`."""
        if not hasattr(self._scratch, "ids"):
            self._scratch.ids = np.empty(ROWS, dtype=np.int32)
        ids: np.ndarray = self._scratch.ids
        return ids

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """The next (ids [B, 8], labels [B])."""
        with self._lock:
            if self._next == len(self._order):
                self._order, self._next = self._rng.permutation(len(self.ids)), 0
            b = int(self._order[self._next])
            self._next += 1
        return self.ids[b], self.labels[b]


def unique_ids(ids: np.ndarray, scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ids of a batch and the inverse map (`unique[inverse] == ids`).

    The ids lie in [0, ROWS): a bitmap marks them and `scratch` (int32 [ROWS], any
    content, one per thread) maps each unique id to its position, two linear passes
    instead of a sort of the batch.
    """
    seen = np.zeros(ROWS, dtype=np.bool_)
    seen[ids] = True
    unique = np.flatnonzero(seen)
    scratch[unique] = np.arange(len(unique), dtype=np.int32)
    return unique, scratch[ids]


def forward_backward(
    rows: np.ndarray, inverse: np.ndarray, head: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Loss, summed row gradients (one per unique id) and the head gradient [w, b].

    `inverse` maps the batch's B * 8 ids to rows of `rows`. The model is linear in the
    rows, so nothing of size [B * 8, DIM] is built: logit = sum_j (E[id_j] . w) + b
    reads one score per unique row, and with s[u] = sum of d loss / d logit over the
    examples holding id u (counted with repeats), d loss / d E[u] = s[u] * w and
    d loss / d w = sum_u s[u] * E[u].
    """
    batch = len(y)
    w, b = head[:DIM], head[DIM]
    scores = rows @ w
    logits = np.take(scores, inverse).reshape(batch, SLOTS).sum(axis=1) + b
    # Numerically stable sigmoid cross-entropy: max(x, 0) - x*y + log(1 + e^-|x|).
    loss = float(np.mean(np.maximum(logits, 0) - logits * y + np.log1p(np.exp(-np.abs(logits)))))
    g_logit = (1.0 / (1.0 + np.exp(-logits)) - y) / batch
    s = np.bincount(inverse, weights=np.repeat(g_logit, SLOTS), minlength=len(rows))
    g_rows = np.multiply.outer(s.astype(rows.dtype), w)
    g_head = np.empty(DIM + 1, dtype=np.float32)
    g_head[:DIM] = s @ rows
    g_head[DIM] = g_logit.sum()
    return loss, g_rows, g_head


def train_step(data: EmbedData, table: EmbeddingTable, head: Variable) -> float:
    """One step on a worker; returns the batch loss."""
    x, y = data.next_batch()
    unique, inverse = unique_ids(x.reshape(-1), data.scratch())
    pending_rows = table.lookup_async(unique, unique=True)  # both pulls in flight
    pending_head = head.read_async()
    rows, head_value = pending_rows.result(), pending_head.result()
    loss, g_rows, g_head = forward_backward(rows, inverse, head_value, y)
    pushed = table.push_gradients_async(unique, g_rows, unique=True)  # both pushes in flight
    head.push_gradient(g_head)
    if pushed is not None:
        pushed.result()
    return loss


def build(
    strategy: Any, lr: float = 0.1, materialize: bool = True
) -> tuple[EmbeddingTable, Variable]:
    """Create E (U(-0.05, 0.05), SGD) and the head [w, b] (zeros, SGD) on the PS.

    `materialize` pulls every row once, like a dense table initialized up front.
    """
    from ps_runtime.server.optimizers import SGD

    per_shard = -(-ROWS // strategy.num_ps)
    table = strategy.create_table(
        "embed/E",
        DIM,
        initializer=("uniform", {"minval": -0.05, "maxval": 0.05, "seed": 7}),
        optimizer=SGD(learning_rate=lr),
        expected_rows_per_shard=per_shard + per_shard // 8,
    )
    head = strategy.create_variable("embed/head", (DIM + 1,), optimizer=SGD(learning_rate=lr))
    if materialize:
        for start in range(0, ROWS, 1 << 17):
            table.lookup_async(np.arange(start, min(start + (1 << 17), ROWS)), unique=True).result()
    return table, head
