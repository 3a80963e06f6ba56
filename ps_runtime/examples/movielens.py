"""Biased matrix factorization on MovieLens, trained on the PS runtime.

The model and its hand-derived gradients are `ps_runtime.models.mf`; the user and item
tables live on the PS shards with Adagrad applied there. This module reads the data,
drives the coordinator, evaluates, reports and checkpoints.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import ps_runtime
from ps_runtime import taskenv
from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.cluster import ClusterResolver, LocalCluster
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator, RemoteValue
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.coordinator.variables import EmbeddingTable
from ps_runtime.models.mf import loss_and_gradients, predict
from ps_runtime.server.optimizers import Adagrad


@dataclass(frozen=True)
class Ratings:
    """Parallel arrays of user ids, item ids and ratings."""

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray

    def __len__(self) -> int:
        return len(self.ratings)

    def take(self, index: np.ndarray) -> Ratings:
        """The ratings at `index`."""
        return Ratings(self.users[index], self.items[index], self.ratings[index])


class Dataset:
    """Train and test ratings plus per-epoch shuffles (same on every worker)."""

    def __init__(self, train: Ratings, test: Ratings, seed: int) -> None:
        self.train = train
        self.test = test
        self.seed = seed
        self._lock = threading.Lock()  # guards _orders
        self._orders: dict[int, np.ndarray] = {}

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The permutation of training examples for `epoch` (keeps the last two)."""
        with self._lock:
            order = self._orders.get(epoch)
            if order is None:
                rng = np.random.default_rng([self.seed, epoch])
                order = self._orders[epoch] = rng.permutation(len(self.train))
                for old in [e for e in self._orders if e < epoch - 1]:
                    del self._orders[old]
            return order

    def batch(self, step: int, batch_size: int) -> Ratings:
        """Batch `step` of an endless stream of passes over the training set, each pass a
        fresh seeded permutation: every batch is full and may span two passes (like
        TensorFlow's `repeat().batch(drop_remainder=True)`)."""
        n = len(self.train)
        start, end = step * batch_size, (step + 1) * batch_size
        parts = []
        while start < end:
            epoch, offset = divmod(start, n)
            take = min(end - start, n - offset)
            parts.append(self.epoch_order(epoch)[offset : offset + take])
            start += take
        return self.train.take(np.concatenate(parts))


def read_ratings(path: str) -> Ratings:
    """Read ml-100k `u.data`/`u1.base` (tab-separated), ml-1m `ratings.dat` (`::`) or
    `ratings.csv` (header userId,movieId,rating,timestamp)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"ratings file {path} does not exist; pass data=<path to "
            "u.data or ratings.csv> or omit it for synthetic data"
        )
    with p.open() as f:
        first = f.readline()
    if "::" in first:
        text = p.read_text().replace("::", "\t")
        table = np.loadtxt(text.splitlines(), delimiter="\t", usecols=(0, 1, 2), ndmin=2)
    elif "," in first:
        skip = 0 if first.split(",")[0].strip().isdigit() else 1
        table = np.loadtxt(p, delimiter=",", skiprows=skip, usecols=(0, 1, 2), ndmin=2)
    else:
        table = np.loadtxt(p, usecols=(0, 1, 2), ndmin=2)
    if len(table) == 0:
        raise ValueError(f"no ratings in {path}")
    return Ratings(
        table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 2].astype(np.float32)
    )


def synthetic_ratings(
    seed: int, num_users: int = 600, num_items: int = 400, num_ratings: int = 40_000, rank: int = 4
) -> Ratings:
    """Seeded low-rank ratings on a 1..5 scale, for runs without a data file."""
    rng = np.random.default_rng(seed)
    p = rng.normal(0, 0.6, (num_users, rank))
    q = rng.normal(0, 0.6, (num_items, rank))
    bu = rng.normal(0, 0.4, num_users)
    bi = rng.normal(0, 0.4, num_items)
    users = rng.integers(0, num_users, num_ratings)
    items = rng.integers(0, num_items, num_ratings)
    raw = 3.5 + bu[users] + bi[items] + np.sum(p[users] * q[items], axis=1)
    ratings = np.clip(np.rint(raw + rng.normal(0, 0.4, num_ratings)), 1, 5)
    return Ratings(users + 1, items + 1, ratings.astype(np.float32))


def load_dataset(data: str | None, test: str | None, seed: int) -> Dataset:
    """Load (or generate) the ratings and split them: `test` file or a seeded 80/20 split."""
    ratings = read_ratings(data) if data else synthetic_ratings(seed)
    if test:
        return Dataset(ratings, read_ratings(test), seed)
    order = np.random.default_rng(seed).permutation(len(ratings))
    cut = round(0.8 * len(ratings))
    return Dataset(ratings.take(order[:cut]), ratings.take(order[cut:]), seed)


def train_step(
    dataset: Dataset,
    users: EmbeddingTable,
    items: EmbeddingTable,
    step: int,
    batch_size: int,
    mean: float,
    l2: float,
    bias_l2: float,
) -> float:
    """One batch on a worker: pull rows, compute gradients, push them; return the loss."""
    b = dataset.batch(step, batch_size)
    # Both pulls in flight at once, then both pushes; the closure returns only once the
    # PS applied them, so join() means every update of the scheduled steps landed.
    pending_u, pending_v = users.lookup_async(b.users), items.lookup_async(b.items)
    u, v = pending_u.result(), pending_v.result()
    loss, gu, gv = loss_and_gradients(u, v, b.ratings, mean, l2, bias_l2)
    pushes = [users.push_gradients_async(b.users, gu), items.push_gradients_async(b.items, gv)]
    for push in pushes:
        if push is not None:  # None while accumulating steps locally
            push.result()
    return loss


def evaluate(dataset: Dataset, users: EmbeddingTable, items: EmbeddingTable, mean: float) -> float:
    """Test RMSE with predictions clipped to [1, 5]."""
    t = dataset.test
    pred = np.clip(predict(users.lookup(t.users), items.lookup(t.items), mean), 1.0, 5.0)
    return float(np.sqrt(np.mean((pred - t.ratings) ** 2)))


def eval_shard(
    dataset: Dataset,
    users: EmbeddingTable,
    items: EmbeddingTable,
    mean: float,
    shard: int,
    num_shards: int,
) -> dict[str, float]:
    """Squared error and count over one shard of the test set (for inline evaluation)."""
    t = dataset.test.take(np.arange(shard, len(dataset.test), num_shards))
    pred = np.clip(predict(users.lookup(t.users), items.lookup(t.items), mean), 1.0, 5.0)
    return {"sse": float(np.sum((pred - t.ratings) ** 2)), "count": float(len(t))}


def evaluate_checkpoints(
    checkpoint_dir: str,
    data: str | None = None,
    test: str | None = None,
    dim: int = 32,
    seed: int = 0,
    poll_seconds: float = 10.0,
    until_step: int | None = None,
) -> dict[str, Any]:
    """Sidecar: report `checkpoint_rmse` for each new checkpoint of a MovieLens job."""
    from ps_runtime.coordinator.evaluation import EvaluationLoop

    dataset = load_dataset(data, test, seed)
    mean = float(np.mean(dataset.train.ratings))

    def build(strategy: ParameterServerStrategy) -> tuple[EmbeddingTable, EmbeddingTable]:
        # Same optimizer as training: a restore brings its slots back.
        return (
            strategy.create_table("mf/users", dim + 1, optimizer=Adagrad()),
            strategy.create_table("mf/items", dim + 1, optimizer=Adagrad()),
        )

    def rmse(tables: tuple[EmbeddingTable, EmbeddingTable]) -> dict[str, float]:
        return {"checkpoint_rmse": evaluate(dataset, tables[0], tables[1], mean)}

    loop = EvaluationLoop(checkpoint_dir, build, rmse)
    stop = threading.Event()
    while not stop.is_set():
        loop.run_once()
        if until_step is not None and until_step in loop.evaluated.values():
            break
        stop.wait(poll_seconds)
    return {"evaluated": sorted(loop.evaluated.values())}


def train(
    data: str | None = None,
    test: str | None = None,
    epochs: int = 15,
    dim: int = 32,
    lr: float = 0.05,
    batch_size: int = 512,
    seed: int = 0,
    l2: float = 0.1,
    bias_l2: float = 0.02,
    init_std: float = 0.01,
    report_every: int = 20,
    checkpoint_every_seconds: float | None = None,
    checkpoint_dir: str | None = None,
    in_flight_per_worker: int = 1,
    cluster: ClusterResolver | None = None,
) -> dict[str, Any]:
    """Train biased MF on the PS cluster and return the final metrics.

    Uses TRAINHUB_CLUSTER when set (agent or launcher), `cluster` when given, and
    otherwise an in-process cluster of one PS and one worker. Reports `train_loss`
    every `report_every` batches and `test_rmse` after each epoch. With a checkpoint
    directory (`checkpoint_dir`, default TRAINHUB_CHECKPOINT_DIR) it resumes from the
    newest checkpoint (mid-epoch too) and saves at epoch ends, at most every
    `checkpoint_every_seconds` (default: TRAINHUB_CHECKPOINT_EVERY_SECONDS or 300), after
    the last epoch, and when the task is asked to stop (SIGTERM): then it finishes the
    steps in flight, saves and returns no result.
    `in_flight_per_worker` > 1 overlaps more steps per worker: faster, staler gradients.
    """
    with session(cluster, checkpoint_dir, in_flight_per_worker) as (strategy, coordinator):
        return _train(
            strategy,
            coordinator,
            data,
            test,
            epochs,
            dim,
            lr,
            batch_size,
            seed,
            l2,
            bias_l2,
            init_std,
            report_every,
            CheckpointManager(strategy, checkpoint_dir, checkpoint_every_seconds),
        )


@contextmanager
def session(
    cluster: ClusterResolver | None,
    checkpoint_dir: str | None = None,
    in_flight_per_worker: int = 1,
) -> Iterator[tuple[ParameterServerStrategy, ClusterCoordinator]]:
    """A strategy and its coordinator on TRAINHUB_CLUSTER when set (agent or launcher),
    on `cluster` when given, else on an in-process cluster of one PS and one worker;
    shut down (the in-process cluster stopped) on the way out."""
    local = None
    if cluster is None:
        if taskenv.CLUSTER.is_set():
            cluster = ClusterResolver()
        else:
            local = LocalCluster(num_ps=1, num_workers=1, checkpoint_dir=checkpoint_dir)
            cluster = local.resolver
    strategy = ParameterServerStrategy(cluster)
    coordinator = ClusterCoordinator(strategy, max_in_flight_per_worker=in_flight_per_worker)
    try:
        yield strategy, coordinator
    finally:
        coordinator.shutdown()
        strategy.close()
        if local is not None:
            local.stop()


def _train(
    strategy: ParameterServerStrategy,
    coordinator: ClusterCoordinator,
    data: str | None,
    test: str | None,
    epochs: int,
    dim: int,
    lr: float,
    batch_size: int,
    seed: int,
    l2: float,
    bias_l2: float,
    init_std: float,
    report_every: int,
    checkpoints: CheckpointManager,
) -> dict[str, Any]:
    dataset = load_dataset(data, test, seed)
    mean = float(np.mean(dataset.train.ratings))
    optimizer = Adagrad(learning_rate=lr)
    init = ("normal", {"stddev": init_std, "seed": seed})
    with strategy.scope():
        users = strategy.create_table("mf/users", dim + 1, initializer=init, optimizer=optimizer)
        items = strategy.create_table("mf/items", dim + 1, initializer=init, optimizer=optimizer)
    per_worker_data = coordinator.create_per_worker_dataset(load_dataset, data, test, seed)
    steps_per_epoch = math.ceil(len(dataset.train) / batch_size)
    examples_per_epoch = steps_per_epoch * batch_size  # full batches, as in the TF baseline
    total_steps = epochs * steps_per_epoch
    # A stop request saves mid-epoch: the first epoch of a resumed run may be partial.
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

    rmse_history: list[float] = []
    start = time.perf_counter()
    epoch_seconds: list[float] = []
    for epoch in range(step // steps_per_epoch, epochs):
        epoch_start, epoch_first_step = time.perf_counter(), step
        while step < (epoch + 1) * steps_per_epoch:
            losses.append(
                (
                    step + 1,
                    coordinator.schedule(
                        train_step,
                        (per_worker_data, users, items, step, batch_size, mean, l2, bias_l2),
                    ),
                )
            )
            step += 1
            if step % report_every == 0:
                report_losses(step - report_every)  # the window before is (nearly) done
            # The last step needs no stop: the run saves and ends right after it anyway.
            if step < total_steps and checkpoints.stop_requested():
                coordinator.join()
                report_losses(step)
                checkpoints.save_and_stop(step)
        coordinator.join()
        epoch_seconds.append(time.perf_counter() - epoch_start)
        report_losses(step)
        with ps_runtime.phase("evaluation"):  # the platform does not count it as a stall
            rmse = evaluate(dataset, users, items, mean)
        rmse_history.append(rmse)
        ps_runtime.report(
            step=step,
            epoch=epoch + 1,
            test_rmse=rmse,
            examples_per_sec=(step - epoch_first_step) * batch_size / epoch_seconds[-1],
        )
        checkpoints.maybe_save(step, force=epoch + 1 == epochs)
    seconds = time.perf_counter() - start
    last_loss = [rv.fetch() for _, rv in losses]
    return {
        "test_rmse": rmse_history[-1] if rmse_history else None,
        "best_test_rmse": min(rmse_history) if rmse_history else None,
        "test_rmse_history": rmse_history,
        "last_train_loss": float(np.mean(last_loss)) if last_loss else None,
        "epochs": epochs,
        "steps": step,
        # Steps whose closure result was fetched: each ran at least once.
        "completed_steps": completed + len(last_loss),
        "train_seconds": seconds,
        "epoch_seconds": epoch_seconds,  # schedule to join, evaluation excluded
        "examples_per_epoch": examples_per_epoch,
        "resumed_from_step": resumed_from,
        "examples_per_sec": (step - resumed_from) * batch_size / seconds if seconds else None,
    }
