"""Biased matrix factorization on MovieLens, written in PyTorch, trained on the PS.

ŷ = μ + b_u + b_i + <p_u, q_i>. Users and items are rows of ONE `PSEmbedding` table
(each row [p, b], dim + 1 floats; item ids offset past the largest user id, as fused
or table-batched embeddings put several tables in one) with Adagrad applied on the PS;
every worker step looks up the batch's user and item ids concatenated, so it is one
pull and one push, runs forward and backward in torch and pushes the row gradients.
The math is that of two tables (rows disjoint, Adagrad per element): u1 test RMSE
<= 0.925 with the defaults, <= 0.921 with l2=0.08, epochs=25. Loss per
batch: mean (ŷ - r)² + λ·mean(‖p_u‖² + ‖q_i‖²) + λ_b·mean(b_u² + b_i²); the defaults
are the `mf` workload of the TensorFlow PS baseline (batches of 1024, Adagrad lr 0.03,
λ = λ_b = 0.05, init N(0, 0.01²), 20 epochs).

    python -m ps_runtime.launch --ps 1 --workers 2 mf:train -- \\
        --data ml-100k/u1.base --test ml-100k/u1.test
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch import nn

import ps_runtime
from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.cluster_coordinator import RemoteValue
from ps_runtime.coordinator.variables import EmbeddingTable
from ps_runtime.examples.movielens import Dataset, load_dataset, session
from ps_runtime.pytorch import PSEmbedding
from ps_runtime.server.optimizers import Adagrad


class BiasedMF(nn.Module):
    """Users and items as rows of one PS embedding table whose last column is the bias:
    user u is row u, item i row `item_offset + i` (the ids offset past the largest user
    id, as fused / table-batched embeddings lay out several tables in one), so a step
    is one forward over the concatenated ids: one pull and one push."""

    def __init__(
        self,
        dim: int,
        mean: float,
        item_offset: int,
        table: EmbeddingTable | None = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.mean = mean
        self.item_offset = item_offset
        self.embedding = PSEmbedding(table, dim=dim + 1)

    def rows(self, users: torch.Tensor, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The users' and the items' rows, from one lookup of the table."""
        ids = torch.cat([users, items + self.item_offset])
        u, i = self.embedding(ids).split([len(users), len(items)])
        return u, i

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Predicted ratings."""
        return self._predict(*self.rows(users, items))

    def _predict(self, u: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        p, bu = u.split([self.dim, 1], dim=1)
        q, bi = i.split([self.dim, 1], dim=1)
        return (p * q).sum(1) + (bu + bi).squeeze(1) + self.mean

    def loss(
        self,
        users: torch.Tensor,
        items: torch.Tensor,
        ratings: torch.Tensor,
        l2: float,
        bias_l2: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(regularized loss, mean squared error) of a batch."""
        u, i = self.rows(users, items)
        err = self._predict(u, i) - ratings
        mse = err.square().mean()
        # λ on each factor column, λ_b on the bias column: one weighted sum of squares.
        weights = torch.full((self.dim + 1,), l2, device=u.device)
        weights[-1] = bias_l2
        return mse + ((u * u + i * i) @ weights).mean(), mse


def item_offset(dataset: Dataset) -> int:
    """Where item ids start in the table: past the largest user id (train or test)."""
    return int(max(dataset.train.users.max(), dataset.test.users.max())) + 1


def worker_model(dim: int, mean: float, offset: int, device: str = "cpu") -> BiasedMF:
    """A worker's copy of the model (built once per worker; the table bound per step)."""
    torch.set_num_threads(1)  # small ops: threads cost more than they give
    return BiasedMF(dim, mean, offset).to(device)


def train_step(
    model: BiasedMF,
    data: Dataset,
    table: EmbeddingTable,
    step: int,
    batch_size: int,
    l2: float,
    bias_l2: float,
) -> float:
    """One batch on a worker; returns its mean squared error. The step returns once the
    PS applied its gradients, so `join()` means every scheduled update landed."""
    model.embedding.bind(table)
    b = data.batch(step, batch_size)
    device = model.embedding.device
    u, i = torch.from_numpy(b.users).to(device), torch.from_numpy(b.items).to(device)
    ratings = torch.from_numpy(b.ratings).to(device)
    loss, mse = model.loss(u, i, ratings, l2, bias_l2)
    loss.backward()  # pushes the touched rows' gradients (users' and items') at once
    model.embedding.flush()
    return mse.item()


def evaluate(model: BiasedMF, data: Dataset) -> float:
    """Test RMSE with predictions clipped to [1, 5]."""
    t, device = data.test, model.embedding.device
    with torch.no_grad():
        users, items = torch.from_numpy(t.users).to(device), torch.from_numpy(t.items).to(device)
        pred = model(users, items).clamp(1.0, 5.0)
        err = pred - torch.from_numpy(t.ratings).to(device)
        return float(torch.sqrt((err * err).mean()))


def train(
    data: str | None = None,
    test: str | None = None,
    epochs: int = 20,
    dim: int = 32,
    lr: float = 0.03,
    batch_size: int = 1024,
    seed: int = 0,
    l2: float = 0.05,
    bias_l2: float = 0.05,
    init_std: float = 0.01,
    report_every: int = 20,
    checkpoint_every_seconds: float | None = None,
    checkpoint_dir: str | None = None,
    in_flight_per_worker: int = 1,
    cluster: ClusterResolver | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train on the PS cluster and return the final metrics.

    `data`/`test`: ml-100k `u1.base`/`u1.test` (any format `read_ratings` reads; without
    `test` a seeded 80/20 split, without `data` generated ratings). Uses
    TRAINHUB_CLUSTER when set, `cluster` when given, else an in-process cluster of one
    PS and one worker. Reports `train_loss` every `report_every` steps and `test_rmse`
    after each epoch; checkpoints, resumes and stops on request as
    `ps_runtime.examples.movielens.train` does. `examples_per_sec` counts every step
    over the whole run; `train_examples_per_sec` epochs 2..N over their schedule-to-join
    time, as the TensorFlow baseline measures. `device` (e.g. "cuda") is where the
    workers' models, their batches and the coordinator's evaluation model run.
    """
    with session(cluster, checkpoint_dir, in_flight_per_worker) as (strategy, coordinator):
        dataset = load_dataset(data, test, seed)
        mean = float(np.mean(dataset.train.ratings))
        init = ("normal", {"stddev": init_std, "seed": seed})
        offset = item_offset(dataset)
        with strategy.scope():
            table = strategy.create_table(
                "mf/embeddings", dim + 1, initializer=init, optimizer=Adagrad(learning_rate=lr)
            )
        # The coordinator's, for evaluation.
        model = BiasedMF(dim, mean, offset, table).to(device)
        checkpoints = CheckpointManager(strategy, checkpoint_dir, checkpoint_every_seconds)
        per_worker_data = coordinator.create_per_worker_dataset(load_dataset, data, test, seed)
        per_worker_model = coordinator.create_per_worker_dataset(
            worker_model, dim, mean, offset, device
        )
        steps_per_epoch = math.ceil(len(dataset.train) / batch_size)
        total_steps = epochs * steps_per_epoch
        resumed_from = step = checkpoints.restore_or_initialize()
        losses: list[tuple[int, RemoteValue]] = []
        reported = completed = step

        def report_losses(upto: int) -> None:
            nonlocal reported, completed
            while reported + report_every <= upto:
                window = [rv.fetch() for s, rv in losses if reported < s <= reported + report_every]
                completed += len(window)
                reported += report_every
                ps_runtime.report(step=reported, train_loss=float(np.mean(window)))
            losses[:] = [(s, rv) for s, rv in losses if s > reported]

        history: list[float] = []
        epoch_seconds: list[float] = []
        start = time.perf_counter()
        for epoch in range(step // steps_per_epoch, epochs):
            epoch_start, first = time.perf_counter(), step
            while step < (epoch + 1) * steps_per_epoch:
                args = (
                    per_worker_model,
                    per_worker_data,
                    table,
                    step,
                    batch_size,
                    l2,
                    bias_l2,
                )
                losses.append((step + 1, coordinator.schedule(train_step, args)))
                step += 1
                if step % report_every == 0:
                    report_losses(step - report_every)  # the window before is (nearly) done
                if step < total_steps and checkpoints.stop_requested():
                    coordinator.join()
                    report_losses(step)
                    checkpoints.save_and_stop(step)
            coordinator.join()
            epoch_seconds.append(time.perf_counter() - epoch_start)
            report_losses(step)
            history.append(evaluate(model, dataset))
            ps_runtime.report(
                step=step,
                epoch=epoch + 1,
                test_rmse=history[-1],
                examples_per_sec=(step - first) * batch_size / epoch_seconds[-1],
            )
            checkpoints.maybe_save(step, force=epoch + 1 == epochs)
        seconds = time.perf_counter() - start
        last = [rv.fetch() for _, rv in losses]
        steady = epoch_seconds[1:] or epoch_seconds
        examples_per_epoch = steps_per_epoch * batch_size  # full batches, as TF's
        return {
            "test_rmse": history[-1] if history else None,
            "best_test_rmse": min(history) if history else None,
            "test_rmse_history": history,
            "last_train_loss": float(np.mean(last)) if last else None,
            "epochs": epochs,
            "steps": step,
            "completed_steps": completed + len(last),
            "train_seconds": seconds,
            "epoch_seconds": epoch_seconds,
            "examples_per_epoch": examples_per_epoch,
            "resumed_from_step": resumed_from,
            "examples_per_sec": (step - resumed_from) * batch_size / seconds if seconds else None,
            "train_examples_per_sec": (
                examples_per_epoch * len(steady) / sum(steady) if steady else None
            ),
        }
