"""Optimizers applied on the PS, to whole dense variables or to touched table rows.

An optimizer implements `update(param, grad, slots, step)` on arrays of the same
shape, in place; `step` is the variable's update count (an int) for dense variables,
and for table rows an array of per-row update counts shaped [n, 1], so sparse ("lazy")
variants correct their bias per row. Dense variables pass their full arrays; tables
pass gathered rows and `apply_rows` scatters them back. Slots live beside the
variable on the PS; `row_slot_names` are one number per table row (e.g. Adam's
per-row step). Hyperparameters can change while training (`set_params`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

Step = int | np.ndarray


def _row_records(a: np.ndarray) -> np.ndarray | None:
    """`a` [n, d] as n opaque records of one row each, or None when it is not C-ordered.

    numpy gathers and scatters one record per index about twice as fast as one row
    of d numbers per index (its fancy indexing loops per element).
    """
    if a.ndim != 2 or not a.flags.c_contiguous or a.shape[1] == 0:
        return None
    return a.view(np.dtype((np.void, a.shape[1] * a.itemsize))).reshape(-1)


def take_rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`a[rows]` (a new array), for a 1-D index `rows`."""
    records = _row_records(a)
    if records is None:
        taken: np.ndarray = a[rows]
        return taken
    taken = records[rows].view(a.dtype)
    return taken.reshape(len(rows), a.shape[1])


def put_rows(a: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """`a[rows] = values` for a 1-D index `rows` (of unique rows) and values [n, d] of
    `a`'s dtype."""
    records = _row_records(a)
    values = np.ascontiguousarray(values, dtype=a.dtype)
    if records is None or values.shape != (len(rows), a.shape[1]):
        a[rows] = values
        return
    records[rows] = values.view(records.dtype).reshape(-1)


class Optimizer:
    """Base class: hyperparameters, slot layout and the in-place update rule."""

    name: ClassVar[str] = ""
    slot_names: ClassVar[tuple[str, ...]] = ()
    # Per-row scalars kept for tables only (dense variables use the variable's step).
    row_slot_names: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[dict[str, float]] = {}

    def __init__(self, **params: float) -> None:
        self.params = dict(self.defaults)
        self.set_params(**params)

    def set_params(self, **params: float) -> None:
        """Change hyperparameters (e.g. learning_rate); takes effect on the next update."""
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise ValueError(
                f"unknown {self.name} parameter(s) {sorted(unknown)}; "
                f"allowed: {sorted(self.defaults)}"
            )
        self.params.update({k: float(v) for k, v in params.items()})

    def slot_initial_value(self, slot: str) -> float:
        """Value a fresh slot entry starts from."""
        return 0.0

    def init_slots(self, shape: tuple[int, ...], dtype: np.dtype) -> dict[str, np.ndarray]:
        """Allocate the slot arrays for a dense variable of `shape`."""
        return {s: np.full(shape, self.slot_initial_value(s), dtype=dtype) for s in self.slot_names}

    def init_row_slots(self, rows: int) -> dict[str, np.ndarray]:
        """Allocate the per-row slot arrays of a table with `rows` rows."""
        return {s: np.zeros(rows, dtype=np.int64) for s in self.row_slot_names}

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: Step
    ) -> None:
        """Apply one update in place; `step` counts updates from 1 (int or [n, 1] array)."""
        raise NotImplementedError

    def apply_dense(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: int
    ) -> None:
        """Update a whole dense variable (or a contiguous slice of it) in place."""
        if grad.shape != param.shape:
            raise ValueError(f"gradient shape {grad.shape} does not match variable {param.shape}")
        self.update(param, grad, slots, step)

    def apply_rows(
        self,
        param: np.ndarray,
        rows: np.ndarray,
        grad: np.ndarray,
        slots: Mapping[str, np.ndarray],
        step: int,
    ) -> None:
        """Update the rows `rows` (unique indices) of `param` and its slots in place.

        Per-row slots (`row_slot_names`) are 1-D; a "step" row slot counts each row's
        own updates and replaces the table-wide `step` in the math.
        """
        p = take_rows(param, rows)
        gathered = {k: take_rows(slots[k], rows) for k in self.slot_names}
        row_step: Step = step
        if "step" in self.row_slot_names:
            steps = slots["step"][rows] + 1
            slots["step"][rows] = steps
            row_step = steps[:, None]
        self.update(p, grad.astype(param.dtype, copy=False), gathered, row_step)
        put_rows(param, rows, p)
        for k, v in gathered.items():
            put_rows(slots[k], rows, v)

    def spec(self) -> tuple[str, dict[str, float]]:
        """Return (name, params), the form sent to the PS."""
        return self.name, dict(self.params)


class SGD(Optimizer):
    """w -= lr * g."""

    name = "sgd"
    defaults = {"learning_rate": 0.01}

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: Step
    ) -> None:
        param -= self.params["learning_rate"] * grad

    def apply_rows(
        self,
        param: np.ndarray,
        rows: np.ndarray,
        grad: np.ndarray,
        slots: Mapping[str, np.ndarray],
        step: int,
    ) -> None:
        # No slots: nothing to gather but the rows.
        p = take_rows(param, rows)
        p -= (self.params["learning_rate"] * grad).astype(param.dtype, copy=False)
        put_rows(param, rows, p)


class Momentum(Optimizer):
    """m = momentum * m + g; w -= lr * m (nesterov: w -= lr * (g + momentum * m))."""

    name = "momentum"
    slot_names = ("momentum",)
    defaults = {"learning_rate": 0.01, "momentum": 0.9, "nesterov": 0.0}

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: Step
    ) -> None:
        m = slots["momentum"]
        mu, lr = self.params["momentum"], self.params["learning_rate"]
        m *= mu
        m += grad
        if self.params["nesterov"]:
            param -= lr * (grad + mu * m)
        else:
            param -= lr * m


class Adagrad(Optimizer):
    """acc += g²; w -= lr * g / (sqrt(acc) + epsilon)."""

    name = "adagrad"
    slot_names = ("accumulator",)
    defaults = {"learning_rate": 0.03, "initial_accumulator": 1e-6, "epsilon": 1e-7}

    def slot_initial_value(self, slot: str) -> float:
        return self.params["initial_accumulator"]

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: Step
    ) -> None:
        acc = slots["accumulator"]
        acc += grad * grad
        param -= self.params["learning_rate"] * grad / (np.sqrt(acc) + self.params["epsilon"])


class Adam(Optimizer):
    """Adam with bias correction; on tables the lazy variant with per-row step counts.

    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
    w -= lr * sqrt(1-b2^t) / (1-b1^t) * m / (sqrt(v) + epsilon).
    """

    name = "adam"
    slot_names = ("m", "v")
    row_slot_names = ("step",)
    defaults = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: Step
    ) -> None:
        b1, b2 = self.params["beta1"], self.params["beta2"]
        m, v = slots["m"], slots["v"]
        m *= b1
        m += (1 - b1) * grad
        v *= b2
        v += (1 - b2) * grad * grad
        t = np.asarray(step, dtype=np.float64)
        lr_t = self.params["learning_rate"] * np.sqrt(1 - b2**t) / (1 - b1**t)
        param -= (lr_t * m / (np.sqrt(v) + self.params["epsilon"])).astype(param.dtype, copy=False)


class FTRL(Optimizer):
    """FTRL-Proximal (McMahan et al.), TensorFlow's formulation with lr_power.

    n' = n + g²; sigma = (n'^-p - n^-p) / lr; z += g - sigma w;
    w = (sign(z) l1 - z) / (n'^-p / lr + 2 l2) where |z| > l1, else 0.
    """

    name = "ftrl"
    slot_names = ("accumulator", "linear")
    defaults = {
        "learning_rate": 0.05,
        "learning_rate_power": -0.5,
        "initial_accumulator": 0.1,
        "l1": 0.0,
        "l2": 0.0,
    }

    def slot_initial_value(self, slot: str) -> float:
        return self.params["initial_accumulator"] if slot == "accumulator" else 0.0

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: Step
    ) -> None:
        lr, p = self.params["learning_rate"], -self.params["learning_rate_power"]
        l1, l2 = self.params["l1"], self.params["l2"]
        n, z = slots["accumulator"], slots["linear"]
        n_new = n + grad * grad
        pow_new = np.sqrt(n_new) if p == 0.5 else n_new**p
        pow_old = np.sqrt(n) if p == 0.5 else n**p
        z += grad - (pow_new - pow_old) / lr * param
        quadratic = pow_new / lr + 2 * l2
        param[...] = np.where(np.abs(z) > l1, (np.sign(z) * l1 - z) / quadratic, 0.0)
        n[...] = n_new


OPTIMIZERS: dict[str, type[Optimizer]] = {
    cls.name: cls for cls in (SGD, Momentum, Adagrad, Adam, FTRL)
}


def make_optimizer(name: str, params: Mapping[str, float] | None = None) -> Optimizer:
    """Build a registered optimizer by name, e.g. make_optimizer("adagrad", {"epsilon": 1e-8})."""
    try:
        cls = OPTIMIZERS[name.lower()]
    except KeyError:
        choices = sorted(OPTIMIZERS)
        raise ValueError(f"unknown optimizer {name!r}; choose one of {choices}") from None
    return cls(**dict(params or {}))
