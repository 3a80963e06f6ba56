"""A DLRM-style click model in PyTorch, trained on the parameter servers.

Sparse features go through one `PSEmbedding` (a PS table shared by every field: each
(field, value) is hashed to its own id, rows created on first use, Adagrad on the PS);
the 13 dense features through a bottom MLP; the interaction is the pairwise dot
products of the bottom MLP's output and the fields' embeddings (DLRM's "dot"), fed
with that output to a top MLP. The MLPs' parameters live on the PS too
(`PSParameters`); workers pull them every step and push their gradients.

Data: Criteo's format when `data=<file>` is given (tab-separated: label, 13 integer
counts, 26 hexadecimal categoricals; empty fields are missing), else clicks generated
from a known model (`generate_clicks`) in which clicks come from feature interactions,
so a logistic regression (`logistic_regression_auc`) stays near 0.69 AUC while DLRM
passes 0.80. `train_local` runs the same model in one process (plain `nn.Embedding`,
torch's Adagrad): the ceiling the PS run is compared with.

    python -m ps_runtime.launch --ps 1 --workers 2 dlrm:train -- --epochs 3
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import ps_runtime
from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.cluster_coordinator import RemoteValue
from ps_runtime.coordinator.variables import EmbeddingTable
from ps_runtime.examples.ctr import auc, hash_features
from ps_runtime.examples.movielens import session
from ps_runtime.pytorch import PSEmbedding, PSParameters
from ps_runtime.server.optimizers import Adagrad

NUM_DENSE = 13
CRITEO_CATEGORICAL = 26
# Standard deviations of the generated logit's two parts.
LINEAR_SD, PAIRS_SD = 1.3, 2.2
P = ParamSpec("P")
R = TypeVar("R")
EMBEDDING_STD = 0.05  # the rows' initial values: normal(0, this)


@dataclass(frozen=True)
class Clicks:
    """Examples as parallel arrays."""

    dense: np.ndarray  # [N, 13] float32, log(1 + count)
    sparse: np.ndarray  # [N, F] int64, hashed (field, value) ids
    labels: np.ndarray  # [N] float32, 0 or 1

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: np.ndarray | slice) -> Clicks:
        """The examples at `index`."""
        return Clicks(self.dense[index], self.sparse[index], self.labels[index])


def generate_clicks(
    examples: int, categorical: int = 8, seed: int = 0, hash_bits: int = 22, cardinality: int = 100
) -> Clicks:
    """Criteo-like clicks from a known model, the same for the same arguments.

    Counts are Poisson with log-normal rates; each categorical field draws Zipf-
    distributed values. Every value has a hidden 4-d vector (zero mean under the data)
    and the counts project to one more; the click logit is the sum of all their
    pairwise dot products (what DLRM's interaction computes, spread PAIRS_SD) plus
    per-value and per-count main effects (spread LINEAR_SD), which are all a linear
    model can use: a logistic regression gets AUC ~0.69, the true logit ~0.91.
    """
    rng = np.random.default_rng([seed, categorical, cardinality])
    k, fields = 4, np.arange(categorical)
    values = (rng.zipf(1.2, size=(examples, categorical)) - 1) % cardinality
    freq = np.stack([np.bincount(values[:, f], minlength=cardinality) for f in fields]) / examples
    vectors = rng.normal(0, 1, (categorical, cardinality, k))
    vectors -= np.einsum("fc,fck->fk", freq, vectors)[:, None, :]
    main = rng.normal(0, 1, (categorical, cardinality))
    main -= (freq * main).sum(axis=1, keepdims=True)
    counts = rng.poisson(np.exp(rng.normal(1.0, 1.0, (examples, NUM_DENSE))))
    dense = np.log1p(counts)
    scaled = (dense - dense.mean(axis=0)) / dense.std(axis=0)
    projection = rng.normal(0, 1 / math.sqrt(NUM_DENSE), (NUM_DENSE, k))
    vecs = np.concatenate([(scaled @ projection)[:, None], vectors[fields, values]], axis=1)
    total = vecs.sum(axis=1)
    pairs = 0.5 * ((total * total).sum(axis=1) - (vecs * vecs).sum(axis=(1, 2)))
    linear = main[fields, values].sum(axis=1) + scaled @ rng.normal(0, 1, NUM_DENSE)
    # Fixed spreads, so every seed has the same structure: what a linear model can use,
    # and the interactions only DLRM can.
    logit = -1.3 + LINEAR_SD * linear / linear.std() + PAIRS_SD * pairs / pairs.std()
    labels = rng.random(examples) < 1 / (1 + np.exp(-logit))
    return Clicks(
        dense.astype(np.float32), hash_features(values, hash_bits), labels.astype(np.float32)
    )


def read_criteo(path: str, hash_bits: int = 22, limit: int | None = None) -> Clicks:
    """Read Criteo's format: label, 13 integer counts, 26 hex categoricals, tab-separated.

    Empty counts read as 0, negative ones as 0 (the usual log(1 + max(x, 0))); an empty
    categorical is its own value per field.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"Criteo file {path} does not exist; omit data= to generate clicks")
    labels: list[float] = []
    dense: list[list[int]] = []
    sparse: list[list[int]] = []
    with p.open() as f:
        for number, line in enumerate(f, 1):
            if limit is not None and len(labels) >= limit:
                break
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 1 + NUM_DENSE + CRITEO_CATEGORICAL:
                raise ValueError(f"{path}:{number}: {len(cols)} columns, Criteo has 40")
            labels.append(float(cols[0]))
            dense.append([max(0, int(c)) if c else 0 for c in cols[1 : 1 + NUM_DENSE]])
            sparse.append([int(c, 16) if c else 1 << 32 for c in cols[1 + NUM_DENSE :]])
    if not labels:
        raise ValueError(f"no examples in {path}")
    return Clicks(
        np.log1p(np.asarray(dense, dtype=np.float32)),
        hash_features(np.asarray(sparse, dtype=np.int64), hash_bits),
        np.asarray(labels, dtype=np.float32),
    )


def load_clicks(
    data: str | None, examples: int, categorical: int, seed: int, hash_bits: int
) -> tuple[Clicks, Clicks]:
    """(train, test): a Criteo file split 90/10 by a seeded shuffle, or generated clicks
    (`examples` for training and a quarter as many more for testing)."""
    if data:
        clicks = read_criteo(data, hash_bits)
        order = np.random.default_rng(seed).permutation(len(clicks))
        cut = int(0.9 * len(clicks))
        return clicks.take(order[:cut]), clicks.take(order[cut:])
    clicks = generate_clicks(examples + examples // 4, categorical, seed, hash_bits)
    return clicks.take(slice(0, examples)), clicks.take(slice(examples, None))


def shuffled_batch(clicks: Clicks, seed: int, step: int, batch_size: int) -> np.ndarray:
    """Indices of batch `step`: full batches of a seeded shuffle per pass."""
    per_pass = max(1, len(clicks) // batch_size)
    order = _order(seed, step // per_pass, len(clicks))
    return order[(step % per_pass) * batch_size :][:batch_size]


_orders: dict[tuple[int, int, int], np.ndarray] = {}


def _order(seed: int, epoch: int, n: int) -> np.ndarray:
    key = (seed, epoch, n)
    order = _orders.get(key)
    if order is None:
        order = np.random.default_rng([seed, epoch]).permutation(n)
        _orders.clear()  # one pass at a time; a race only draws the same order twice
        _orders[key] = order
    return order


class Batches:
    """A worker's training data (built once per worker)."""

    def __init__(self, data: str | None, examples: int, categorical: int, seed: int, bits: int):
        self.train, _ = load_clicks(data, examples, categorical, seed, bits)
        self.seed = seed

    def batch(self, step: int, batch_size: int) -> Clicks:
        return self.train.take(shuffled_batch(self.train, self.seed, step, batch_size))


def mlp(sizes: Sequence[int], relu_last: bool) -> nn.Sequential:
    """Linear layers with ReLUs between them (and after the last with `relu_last`)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if relu_last or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """Bottom MLP for the counts, `embedding` for the fields ([B, F] ids to [B, F, dim]:
    a `PSEmbedding` or an `nn.Embedding`), dot interaction, top MLP; outputs logits."""

    def __init__(
        self,
        embedding: nn.Module,
        fields: int,
        dim: int,
        bottom: Sequence[int] = (64,),
        top: Sequence[int] = (64, 32),
    ) -> None:
        super().__init__()
        self.fields = fields
        self.embedding = embedding
        self.bottom = mlp([NUM_DENSE, *bottom, dim], relu_last=True)
        left, right = torch.triu_indices(fields + 1, fields + 1, offset=1)
        self.register_buffer("left", left, persistent=False)
        self.register_buffer("right", right, persistent=False)
        self.top = mlp([dim + len(left), *top, 1], relu_last=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        if sparse.shape[1] != self.fields:
            raise ValueError(f"{sparse.shape[1]} categorical fields, the model has {self.fields}")
        x = self.bottom(dense)
        vectors = torch.cat([x[:, None], self.embedding(sparse)], dim=1)  # [B, F + 1, dim]
        dots = torch.bmm(vectors, vectors.transpose(1, 2))
        pairs = dots[:, self.get_buffer("left"), self.get_buffer("right")]
        logits: torch.Tensor = self.top(torch.cat([x, pairs], dim=1)).squeeze(1)
        return logits


def worker_model(fields: int, dim: int, device: str = "cpu") -> DLRM:
    """A worker's copy of the model on `device` (built once per worker; handles bound
    per step)."""
    torch.set_num_threads(1)  # the worker shares its cores with the others
    return DLRM(PSEmbedding(dim=dim), fields, dim).to(device)


def train_step(
    model: DLRM,
    data: Batches,
    table: EmbeddingTable,
    dense: Mapping[str, Any],
    step: int,
    batch_size: int,
) -> float:
    """One batch on a worker; returns its log loss once the PS applied its gradients."""
    embedding: PSEmbedding = model.embedding  # type: ignore[assignment]
    embedding.bind(table)
    params = PSParameters(dense).bind(model)
    b, device = data.batch(step, batch_size), embedding.device
    sparse = torch.from_numpy(b.sparse)
    embedding.prefetch(sparse)  # the rows come while the dense values do
    params.pull()
    logits = model(torch.from_numpy(b.dense).to(device), sparse.to(device))
    loss = F.binary_cross_entropy_with_logits(logits, torch.from_numpy(b.labels).to(device))
    loss.backward()
    params.push()
    embedding.flush()
    params.flush()
    return loss.item()


def predict(
    model: nn.Module, clicks: Clicks, chunk: int = 16384, device: str = "cpu"
) -> np.ndarray:
    """Logits for every example (no gradients), computed on `device`."""
    with torch.no_grad():
        parts = [
            model(torch.from_numpy(c.dense).to(device), torch.from_numpy(c.sparse).to(device))
            .cpu()
            .numpy()
            for c in (clicks.take(slice(i, i + chunk)) for i in range(0, len(clicks), chunk))
        ]
    return np.concatenate(parts)


def one_torch_thread(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` with torch on one thread, as a worker does (on a busy machine, threads
    waiting for each other cost more than small ops gain); the setting is restored."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(before)

    return run


def _metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    logloss = np.mean(np.logaddexp(0, logits) - labels * logits)
    return {"test_auc": auc(labels, logits), "test_logloss": float(logloss)}


def train(
    data: str | None = None,
    examples: int = 100_000,
    categorical: int = 8,
    dim: int = 16,
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 0.05,
    adagrad_init: float = 1e-6,
    seed: int = 0,
    hash_bits: int = 22,
    report_every: int = 50,
    checkpoint_every_seconds: float | None = None,
    checkpoint_dir: str | None = None,
    in_flight_per_worker: int = 1,
    cluster: ClusterResolver | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train DLRM on the PS cluster; reports `train_loss` and, per epoch, `test_auc`.

    `data`: a Criteo-format file (26 categoricals), else `examples` generated clicks
    with `categorical` fields. Uses TRAINHUB_CLUSTER when set, `cluster` when given,
    else an in-process cluster of one PS and one worker. With a checkpoint directory
    (`checkpoint_dir`, default TRAINHUB_CHECKPOINT_DIR) it resumes from the newest
    checkpoint and saves at epoch ends (at most every `checkpoint_every_seconds`), at
    the end, and when the task is asked to stop (then it returns no result).
    `in_flight_per_worker` must stay 1: a worker's model serves one step at a time.
    `device` (e.g. "cuda") is where the workers' models, their batches and the
    coordinator's evaluation model run; the PS holds the state either way.
    """
    fields = CRITEO_CATEGORICAL if data else categorical
    with session(cluster, checkpoint_dir, in_flight_per_worker) as (strategy, coordinator):
        train_set, test = load_clicks(data, examples, categorical, seed, hash_bits)
        torch.manual_seed(seed)  # the dense parameters' start, copied to the PS
        with strategy.scope():
            table = strategy.create_table(
                "dlrm/embedding",
                dim,
                initializer=("normal", {"stddev": EMBEDDING_STD, "seed": seed}),
                optimizer=Adagrad(learning_rate=lr, initial_accumulator=adagrad_init),
            )
            model = DLRM(PSEmbedding(table), fields, dim)  # the coordinator's, to evaluate
            dense = PSParameters.create(
                model,
                "dlrm/dense",
                optimizer=Adagrad(learning_rate=lr, initial_accumulator=adagrad_init),
            )
        model.to(device)
        evaluation = dense.bind(model)
        checkpoints = CheckpointManager(strategy, checkpoint_dir, checkpoint_every_seconds)
        batches = coordinator.create_per_worker_dataset(
            Batches, data, examples, categorical, seed, hash_bits
        )
        worker = coordinator.create_per_worker_dataset(worker_model, fields, dim, device)
        steps_per_epoch = max(1, len(train_set) // batch_size)
        total = epochs * steps_per_epoch
        resumed_from = step = checkpoints.restore_or_initialize()
        losses: list[RemoteValue] = []
        history: list[float] = []
        metrics: dict[str, float] = {}
        start = time.perf_counter()
        while step < total:
            losses.append(
                coordinator.schedule(train_step, (worker, batches, table, dense, step, batch_size))
            )
            step += 1
            if step % report_every == 0:
                window, losses = losses, []
                ps_runtime.report(step=step, train_loss=float(np.mean([v.fetch() for v in window])))
            if step % steps_per_epoch == 0 or step == total:
                coordinator.join()
                evaluation.pull()
                metrics = _metrics(test.labels, predict(model, test, device=device))
                history.append(metrics["test_auc"])
                ps_runtime.report(step=step, epoch=math.ceil(step / steps_per_epoch), **metrics)
                checkpoints.maybe_save(step, force=step == total)
            elif checkpoints.stop_requested():
                coordinator.join()
                checkpoints.save_and_stop(step)
        seconds = time.perf_counter() - start
        last = [v.fetch() for v in losses]
        return {
            **metrics,
            "auc_history": history,
            "last_train_loss": float(np.mean(last)) if last else None,
            "epochs": epochs,
            "steps": step,
            "resumed_from_step": resumed_from,
            "train_seconds": seconds,
            "examples_per_sec": (step - resumed_from) * batch_size / seconds if seconds else None,
        }


def compact_ids(train: Clicks, test: Clicks) -> tuple[Clicks, Clicks, int]:
    """The same examples with ids renumbered 0..V-1, and V (for an `nn.Embedding`)."""
    vocab, index = np.unique(np.concatenate([train.sparse, test.sparse]), return_inverse=True)
    index = index.reshape(-1, train.sparse.shape[1])
    return (
        Clicks(train.dense, index[: len(train)], train.labels),
        Clicks(test.dense, index[len(train) :], test.labels),
        len(vocab),
    )


@one_torch_thread
def train_local(
    data: str | None = None,
    examples: int = 100_000,
    categorical: int = 8,
    dim: int = 16,
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 0.05,
    adagrad_init: float = 1e-6,
    seed: int = 0,
    hash_bits: int = 22,
    device: str = "cpu",
) -> dict[str, Any]:
    """The same model, data and optimizer in one process on one torch thread, no PS:
    `nn.Embedding` over the ids seen, torch's Adagrad with the PS's constants, on
    `device`. The ceiling for `train`."""
    train_set, test, vocab = compact_ids(*load_clicks(data, examples, categorical, seed, hash_bits))
    torch.manual_seed(seed)  # the MLPs start as in `train` (built before the embedding)
    model = DLRM(nn.Identity(), train_set.sparse.shape[1], dim)
    model.embedding = nn.Embedding(vocab, dim)
    nn.init.normal_(model.embedding.weight, 0, EMBEDDING_STD)  # the PS table's initializer
    model.to(device)
    optimizer = torch.optim.Adagrad(
        model.parameters(), lr=lr, initial_accumulator_value=adagrad_init, eps=1e-7
    )
    steps_per_epoch = max(1, len(train_set) // batch_size)
    start = time.perf_counter()
    for step in range(epochs * steps_per_epoch):
        b = train_set.take(shuffled_batch(train_set, seed, step, batch_size))
        dense, sparse = torch.from_numpy(b.dense).to(device), torch.from_numpy(b.sparse).to(device)
        logits = model(dense, sparse)
        labels = torch.from_numpy(b.labels).to(device)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)  # the steps' kernels are done before the clock stops
    seconds = time.perf_counter() - start
    return {
        **_metrics(test.labels, predict(model, test, device=device)),
        "steps": epochs * steps_per_epoch,
        "examples_per_sec": epochs * steps_per_epoch * batch_size / seconds,
    }


@one_torch_thread
def logistic_regression_auc(
    data: str | None = None,
    examples: int = 100_000,
    categorical: int = 8,
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 0.1,
    seed: int = 0,
    hash_bits: int = 22,
) -> float:
    """Test AUC of a logistic regression (a weight per id and per count) trained on the
    same data in one process: what a model without interactions reaches."""
    train_set, test, vocab = compact_ids(*load_clicks(data, examples, categorical, seed, hash_bits))
    weights = nn.Embedding(vocab, 1)
    nn.init.zeros_(weights.weight)
    counts = nn.Linear(NUM_DENSE, 1)
    params = [*weights.parameters(), *counts.parameters()]
    optimizer = torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=1e-6, eps=1e-7)

    def logits(clicks: Clicks) -> torch.Tensor:
        ids, dense = torch.from_numpy(clicks.sparse), torch.from_numpy(clicks.dense)
        return weights(ids).sum(dim=(1, 2)) + counts(dense).squeeze(1)

    steps_per_epoch = max(1, len(train_set) // batch_size)
    for step in range(epochs * steps_per_epoch):
        b = train_set.take(shuffled_batch(train_set, seed, step, batch_size))
        loss = F.binary_cross_entropy_with_logits(logits(b), torch.from_numpy(b.labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return auc(test.labels, logits(test).numpy())
