"""Click-through prediction on synthetic hashed features: logistic regression or wide & deep.

The data comes from a hidden model with per-value weights and one pairwise interaction
(which only the deep tower can capture), so wide & deep should beat logistic regression.
Feature values are hashed into one id space shared by all fields, as production CTR
models do; the wide weights (dim 1) and the embeddings (dim `dim`) are PS tables, the
MLP is a few dense PS variables, and every worker step pulls, computes and pushes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import ps_runtime
from ps_runtime import taskenv
from ps_runtime.coordinator.cluster import ClusterResolver, LocalCluster
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.coordinator.variables import EmbeddingTable, Variable
from ps_runtime.models import logistic, wide_deep
from ps_runtime.server.optimizers import Adagrad

MODELS = ("logistic", "wide_deep")


@dataclass(frozen=True)
class ClickData:
    ids: np.ndarray  # (N, F) hashed feature ids
    labels: np.ndarray  # (N,) 0/1 float32


def hash_features(values: np.ndarray, hash_bits: int) -> np.ndarray:
    """Map (example, field) → value to ids in [0, 2**hash_bits), distinct per field."""
    fields = np.arange(values.shape[1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = fields[None, :] * np.uint64(1_000_003) + values.astype(np.uint64)
        key *= np.uint64(0x9E3779B97F4A7C15)
        key ^= key >> np.uint64(29)
    return (key % np.uint64(1 << hash_bits)).astype(np.int64)


def synthetic_clicks(
    examples: int, fields: int, cardinality: int, hash_bits: int, seed: int
) -> tuple[ClickData, ClickData]:
    """Train and test sets (90/10) drawn from a seeded hidden model."""
    rng = np.random.default_rng(seed)
    values = rng.zipf(1.3, size=(examples, fields)) % cardinality
    weights = rng.normal(0, 0.6, (fields, cardinality))
    logit = weights[np.arange(fields), values].sum(axis=1) - 1.0
    # An interaction a linear model cannot express: a sign flip between fields 0 and 1.
    logit += 1.5 * np.where((values[:, 0] % 2) == (values[:, 1] % 2), 1.0, -1.0)
    labels = (rng.random(examples) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    ids = hash_features(values, hash_bits)
    cut = int(0.9 * examples)
    return ClickData(ids[:cut], labels[:cut]), ClickData(ids[cut:], labels[cut:])


class Batches:
    """A worker's view of the training data: batch k of a seeded shuffle per pass."""

    def __init__(
        self, examples: int, fields: int, cardinality: int, hash_bits: int, seed: int
    ) -> None:
        self.train, _ = synthetic_clicks(examples, fields, cardinality, hash_bits, seed)
        self.seed = seed

    def batch(self, step: int, batch_size: int) -> ClickData:
        per_pass = max(1, len(self.train.labels) // batch_size)
        order = np.random.default_rng([self.seed, step // per_pass]).permutation(
            len(self.train.labels)
        )
        take = order[(step % per_pass) * batch_size : (step % per_pass + 1) * batch_size]
        return ClickData(self.train.ids[take], self.train.labels[take])


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney), ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # Average ranks over ties.
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _gather(table: EmbeddingTable, ids: np.ndarray) -> np.ndarray:
    return table.lookup(ids.reshape(-1)).reshape((*ids.shape, table.dim))


def _mlp(variables: list[Variable]) -> wide_deep.MLP:
    return wide_deep.MLP(*(v.read() for v in variables))


def train_step(
    data: Batches,
    model: str,
    wide: EmbeddingTable,
    emb: EmbeddingTable | None,
    dense: list[Variable],
    step: int,
    batch_size: int,
) -> float:
    """One batch on a worker: pull rows and dense weights, compute, push gradients."""
    b = data.batch(step, batch_size)
    flat = b.ids.reshape(-1)
    w = _gather(wide, b.ids)
    if model == "logistic":
        bias = dense[0].read()
        loss, gw, gb = logistic.loss_and_gradients(w, float(bias[0]), b.labels)
        dense[0].push_gradient(np.array([gb], dtype=np.float32))
    else:
        assert emb is not None
        loss, grads = wide_deep.loss_and_gradients(w, _gather(emb, b.ids), _mlp(dense), b.labels)
        gw = grads.wide
        emb.push_gradients(flat, grads.embeddings.reshape(len(flat), -1))
        for variable, grad in zip(dense, grads.mlp.arrays(), strict=True):
            variable.push_gradient(grad)
    wide.push_gradients(flat, gw.reshape(len(flat), 1))
    return loss


def predict(
    test: ClickData,
    model: str,
    wide: EmbeddingTable,
    emb: EmbeddingTable | None,
    dense: list[Variable],
) -> np.ndarray:
    w = _gather(wide, test.ids)
    if model == "logistic":
        return logistic.forward(w, float(dense[0].read()[0]))
    assert emb is not None
    return wide_deep.forward(w, _gather(emb, test.ids), _mlp(dense))


def train(
    model: str = "wide_deep",
    steps: int = 400,
    batch_size: int = 512,
    fields: int = 8,
    cardinality: int = 1000,
    hash_bits: int = 18,
    dim: int = 8,
    hidden: int = 32,
    lr: float = 0.05,
    examples: int = 100_000,
    seed: int = 0,
    eval_every: int = 100,
    report_every: int = 20,
    cluster: ClusterResolver | None = None,
) -> dict[str, Any]:
    """Train a CTR model on the PS cluster; reports train_loss, test_logloss and test_auc."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, not {model!r}")
    local = None
    if cluster is None:
        if taskenv.CLUSTER.is_set():
            cluster = ClusterResolver()
        else:
            local = LocalCluster(num_ps=1, num_workers=1)
            cluster = local.resolver
    strategy = ParameterServerStrategy(cluster, optimizer=Adagrad(learning_rate=lr))
    coordinator = ClusterCoordinator(strategy)
    try:
        _, test = synthetic_clicks(examples, fields, cardinality, hash_bits, seed)
        with strategy.scope():
            wide = strategy.create_table("ctr/wide", 1, initializer="zeros")
            emb = dense_vars = None
            if model == "logistic":
                dense_vars = [strategy.create_variable("ctr/bias", (1,))]
            else:
                emb = strategy.create_table(
                    "ctr/emb", dim, initializer=("normal", {"stddev": 0.05, "seed": seed})
                )
                fan_in = fields * dim
                dense_vars = [
                    strategy.create_variable(
                        "ctr/w1",
                        (fan_in, hidden),
                        initializer=(
                            "normal",
                            {"stddev": math.sqrt(2.0 / fan_in), "seed": seed + 1},
                        ),
                    ),
                    strategy.create_variable("ctr/b1", (hidden,)),
                    strategy.create_variable(
                        "ctr/w2",
                        (hidden,),
                        initializer=(
                            "normal",
                            {"stddev": math.sqrt(1.0 / hidden), "seed": seed + 2},
                        ),
                    ),
                    strategy.create_variable("ctr/b2", (1,)),
                ]
        data = coordinator.create_per_worker_dataset(
            Batches, examples, fields, cardinality, hash_bits, seed
        )
        start = time.perf_counter()
        pending = []
        metrics: dict[str, Any] = {}
        for step in range(1, steps + 1):
            pending.append(
                coordinator.schedule(
                    train_step, (data, model, wide, emb, dense_vars, step - 1, batch_size)
                )
            )
            if step % report_every == 0:
                coordinator.join()
                ps_runtime.report(
                    step=step, train_loss=float(np.mean([rv.fetch() for rv in pending]))
                )
                pending.clear()
            if step % eval_every == 0 or step == steps:
                coordinator.join()
                logits = predict(test, model, wide, emb, dense_vars)
                metrics = {
                    "test_auc": auc(test.labels, logits),
                    "test_logloss": float(np.mean(np.logaddexp(0, logits) - test.labels * logits)),
                }
                ps_runtime.report(step=step, **metrics)
        seconds = time.perf_counter() - start
        return {
            "model": model,
            "steps": steps,
            **metrics,
            "examples_per_sec": steps * batch_size / seconds,
        }
    finally:
        coordinator.shutdown()
        strategy.close()
        if local is not None:
            local.stop()
