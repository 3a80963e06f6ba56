"""AutoRec on MovieLens, trained on the PS runtime: I-AutoRec blended with U-AutoRec.

The model and its hand-derived gradients are `ps_runtime.models.autorec`. Each view
(item-based: one input per item, over the users; user-based: the transpose) has four dense
variables on the PS shards with Adam applied there. A step is one full-batch gradient of
one view (the rating matrix is small); the views train side by side, one step each per
round, so two workers are both busy. Training has two phases:

1. select: hold out `val_fraction` of the *training* ratings, train each view until its
   held-out RMSE has not improved for `patience` epochs, remember its best epoch, and
   pick the blend weight of the user view on the held-out ratings;
2. final: train fresh variables on all training ratings for each view's best epoch
   count, then report test RMSE of the blend (clipped to [1, 5]; users or items without
   training ratings get the training mean).

The selection (best epochs, held-out predictions, blend weight) lives in small PS
variables, so a checkpoint taken anywhere resumes exactly; data loading, the rating
arrays and the metrics line are those of `ps_runtime.examples.movielens`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import ps_runtime
from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from ps_runtime.coordinator.variables import Variable
from ps_runtime.examples.movielens import Ratings, load_dataset, session
from ps_runtime.models.autorec import Params, init_params, loss_and_gradients, predict
from ps_runtime.server.optimizers import SGD, Adam

VIEWS = ("item", "user")
PHASES = ("select", "final")
BLEND_GRID = np.linspace(0.0, 1.0, 21)


class AutoRecData:
    """The ratings as dense matrices per phase and view, plus id-to-index maps.

    Built the same way on the coordinator and on every worker (seeded split).
    """

    def __init__(self, data: str | None, test: str | None, seed: int, val_fraction: float) -> None:
        dataset = load_dataset(data, test, seed)
        train = dataset.train
        self.test = dataset.test
        self.user_ids = np.unique(train.users)
        self.item_ids = np.unique(train.items)
        order = np.random.default_rng([seed, 7]).permutation(len(train))
        cut = round(val_fraction * len(train))
        self.val = train.take(order[:cut])
        self.fit = {"select": train.take(order[cut:]), "final": train}
        self.mean = {phase: float(np.mean(r.ratings)) for phase, r in self.fit.items()}
        self._matrices: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}

    def index(self, r: Ratings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row indices of the users and items of `r`, and which pairs both are known."""
        u = np.searchsorted(self.user_ids, r.users).clip(0, len(self.user_ids) - 1)
        i = np.searchsorted(self.item_ids, r.items).clip(0, len(self.item_ids) - 1)
        known = (self.user_ids[u] == r.users) & (self.item_ids[i] == r.items)
        return u, i, known

    def num_inputs(self, view: str) -> int:
        """Length of one column: users for the item view, items for the user view."""
        return len(self.user_ids) if view == "item" else len(self.item_ids)

    def matrix(self, phase: str, view: str) -> tuple[np.ndarray, np.ndarray]:
        """(ratings with zeros where unobserved, observed mask): one row per column."""
        key = (phase, view)
        if key not in self._matrices:
            u, i, _ = self.index(self.fit[phase])
            x = np.zeros((len(self.item_ids), len(self.user_ids)), np.float32)
            x[i, u] = self.fit[phase].ratings
            if view == "user":
                x = np.ascontiguousarray(x.T)
            self._matrices[key] = (x, (x > 0).astype(np.float32))
        return self._matrices[key]

    def predictions(self, phase: str, view: str, params: Params, r: Ratings) -> np.ndarray:
        """Unclipped predictions of one view for the pairs in `r` (NaN where unknown)."""
        u, i, known = self.index(r)
        y = predict(self.matrix(phase, view)[0], params)
        out = y[i, u] if view == "item" else y[u, i]
        return np.where(known, out, np.nan)


def blend_rmse(preds: np.ndarray, weight: float, r: Ratings, mean: float) -> float:
    """RMSE of (1-w)·item + w·user, clipped to [1, 5]; NaN (unknown) falls back to mean."""
    p = (1.0 - weight) * preds[0] + weight * preds[1] if len(preds) > 1 else preds[0]
    p = np.where(np.isnan(p), mean, np.clip(p, 1.0, 5.0))
    return float(np.sqrt(np.mean((p - r.ratings) ** 2)))


def pull(variables: list[Variable]) -> Params:
    """Read the four variables of a view (all pulls in flight at once)."""
    pending = [v.read_async() for v in variables]
    return Params(*(p.result() for p in pending))


def assign(variable: Variable, value: np.ndarray) -> None:
    """Set a bookkeeping variable (optimizer SGD with learning rate 1): push old - new."""
    variable.push_gradient(variable.read_async().result() - value.astype(variable.dtype))


def train_step(
    data: AutoRecData, phase: str, view: str, variables: list[Variable], l2: float
) -> float:
    """One full-batch step of one view on a worker; returns the loss per observed rating."""
    x, mask = data.matrix(phase, view)
    loss, grads = loss_and_gradients(x, mask, pull(variables), l2)
    for variable, grad in zip(variables, grads, strict=True):
        variable.push_gradient(grad)
    return loss / float(mask.sum())


def train(
    data: str | None = None,
    test: str | None = None,
    hidden: int = 500,
    l2: float = 200.0,
    user_l2: float = 100.0,
    lr: float = 0.003,
    max_epochs: int = 400,
    patience: int = 50,
    eval_every: int = 10,
    val_fraction: float = 0.05,
    user_view: bool = True,
    seed: int = 0,
    checkpoint_every_seconds: float | None = None,
    checkpoint_dir: str | None = None,
    cluster: ClusterResolver | None = None,
) -> dict[str, Any]:
    """Train AutoRec on the PS cluster and return the final metrics.

    `l2` is λ of the item view and `user_l2` of the user view (`user_view=False` trains
    I-AutoRec alone). Cluster and checkpoints work as in `movielens.train`: TRAINHUB_CLUSTER
    or `cluster` or an in-process cluster; with a checkpoint directory it resumes from the
    newest checkpoint, saves every `checkpoint_every_seconds` at evaluation rounds and at
    the end, and on a stop request (SIGTERM) saves where it is and returns no result.
    """
    settings = {
        "hidden": hidden,
        "l2": {"item": l2, "user": user_l2},
        "lr": lr,
        "max_epochs": max_epochs,
        "patience": patience,
        "eval_every": eval_every,
        "views": VIEWS if user_view else VIEWS[:1],
    }
    with session(cluster, checkpoint_dir) as (strategy, coordinator):
        return _train(
            strategy,
            coordinator,
            (data, test, seed, val_fraction),
            settings,
            seed,
            CheckpointManager(strategy, checkpoint_dir, checkpoint_every_seconds),
        )


def _train(
    strategy: ParameterServerStrategy,
    coordinator: ClusterCoordinator,
    data_args: tuple[str | None, str | None, int, float],
    s: dict[str, Any],
    seed: int,
    checkpoints: CheckpointManager,
) -> dict[str, Any]:
    data = AutoRecData(*data_args)
    views: tuple[str, ...] = s["views"]
    n_val = len(data.val)
    # Per view: [best epoch, best held-out RMSE, held-out predictions...]; progress:
    # [rounds the select phase took (0 while it runs), blend weight of the user view].
    # float64 so that `assign` (a push of old - new) sets them exactly.
    best0 = np.zeros((len(views), 2 + n_val))
    best0[:, 1] = 99.0
    variables: dict[tuple[str, str], list[Variable]] = {}
    with strategy.scope():
        for phase in PHASES:
            for k, view in enumerate(views):
                init = init_params(data.num_inputs(view), s["hidden"], seed + 10 * k)
                variables[phase, view] = [
                    strategy.create_variable(
                        f"autorec/{phase}/{view}/{name}",
                        initial_value=value,
                        optimizer=Adam(learning_rate=s["lr"], epsilon=1e-8),
                    )
                    for name, value in zip(Params._fields, init, strict=True)
                ]
        keep = SGD(learning_rate=1.0)
        best_var = strategy.create_variable(
            "autorec/best", dtype="float64", initial_value=best0, optimizer=keep
        )
        progress_var = strategy.create_variable(
            "autorec/progress", dtype="float64", initial_value=np.zeros(2), optimizer=keep
        )
    worker_data = coordinator.create_per_worker_dataset(AutoRecData, *data_args)
    resumed_from = step = checkpoints.restore_or_initialize()
    best = best_var.read_async().result().astype(np.float64)
    select_rounds, weight = (float(x) for x in progress_var.read_async().result())
    observed = {
        (phase, view): float(data.matrix(phase, view)[1].sum())
        for phase in PHASES
        for view in views
    }
    start = time.perf_counter()
    examples = 0.0

    def run_round(phase: str, active: list[str], epoch: int) -> None:
        nonlocal step, examples
        pending = [
            coordinator.schedule(
                train_step,
                (worker_data, phase, view, variables[phase, view], s["l2"][view]),
            )
            for view in active
        ]
        coordinator.join()
        step += 1
        examples += sum(observed[phase, view] for view in active)
        losses = {f"train_loss_{v}": p.fetch() for v, p in zip(active, pending, strict=True)}
        if epoch % s["eval_every"] == 0:
            ps_runtime.report(step=step, phase=phase, epoch=epoch, **losses)

    def stop_if_requested() -> None:
        # After a round's evaluation and bookkeeping, so a checkpoint never skips them.
        if checkpoints.stop_requested():
            checkpoints.save_and_stop(step)

    # Phase 1: early stopping on the held-out slice of the training ratings.
    if not select_rounds:
        epoch = step
        last_eval = epoch - epoch % s["eval_every"]
        active = [v for k, v in enumerate(views) if last_eval - best[k, 0] < s["patience"]]
        while epoch < s["max_epochs"] and active:
            epoch += 1
            run_round("select", active, epoch)
            if epoch % s["eval_every"] and epoch < s["max_epochs"]:
                stop_if_requested()
                continue
            for view in list(active):
                k = views.index(view)
                params = pull(variables["select", view])
                preds = data.predictions("select", view, params, data.val)
                rmse = blend_rmse(preds[None], 0.0, data.val, data.mean["select"])
                ps_runtime.report(step=step, epoch=epoch, **{f"val_rmse_{view}": rmse})
                if rmse < best[k, 1]:
                    best[k, 0], best[k, 1], best[k, 2:] = epoch, rmse, preds
                if epoch - best[k, 0] >= s["patience"]:
                    active.remove(view)
            assign(best_var, best)
            checkpoints.maybe_save(step)
            stop_if_requested()
        val_preds = best[:, 2:]
        scores = [blend_rmse(val_preds, w, data.val, data.mean["select"]) for w in BLEND_GRID]
        weight = float(BLEND_GRID[int(np.argmin(scores))]) if len(views) > 1 else 0.0
        select_rounds = float(step)
        assign(progress_var, np.array([select_rounds, weight]))
        ps_runtime.report(step=step, val_rmse_blend=min(scores), blend_weight=weight)
    epochs = {view: int(best[k, 0]) for k, view in enumerate(views)}

    # Phase 2: all training ratings, each view for its selected number of epochs.
    def test_rmse() -> tuple[float, dict[str, float]]:
        preds = np.stack(
            [data.predictions("final", v, pull(variables["final", v]), data.test) for v in views]
        )
        single = {
            f"test_rmse_{v}": blend_rmse(preds[k][None], 0.0, data.test, data.mean["final"])
            for k, v in enumerate(views)
        }
        return blend_rmse(preds, weight, data.test, data.mean["final"]), single

    history: list[float] = []
    total = max(epochs.values())
    epoch = step - int(select_rounds)
    while epoch < total:
        epoch += 1
        run_round("final", [v for v in views if epoch <= epochs[v]], epoch)
        if epoch % s["eval_every"] == 0 or epoch == total:
            rmse, single = test_rmse()
            history.append(rmse)
            ps_runtime.report(step=step, epoch=epoch, test_rmse=rmse, **single)
            checkpoints.maybe_save(step, force=epoch == total)
        if epoch < total:
            stop_if_requested()
    seconds = time.perf_counter() - start
    rmse, single = test_rmse()
    return {
        "test_rmse": rmse,
        **single,
        "test_rmse_history": history,
        "blend_weight": weight,
        "epochs": total,
        "epochs_per_view": epochs,
        "select_epochs": int(select_rounds),
        "best_val_rmse": {v: float(best[k, 1]) for k, v in enumerate(views)},
        "steps": step,
        "resumed_from_step": resumed_from,
        "train_seconds": seconds,
        # Observed training ratings through the model (each step is a full pass of a view).
        "examples_per_sec": examples / seconds if seconds else None,
    }
