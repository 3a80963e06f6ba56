"""Optimizers applied on the PS, to whole dense variables or to touched table rows.

An optimizer implements `update(param, grad, slots, step)` on arrays of the same
shape, in place. Dense variables pass their full arrays; tables pass gathered rows
and `apply_rows` scatters them back. Adding momentum, Adam or FTRL means writing one
class with its `slot_names` and `update`, and registering it in `OPTIMIZERS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np


class Optimizer:
    """Base class: hyperparameters, slot layout and the in-place update rule."""

    name: ClassVar[str] = ""
    slot_names: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[dict[str, float]] = {}

    def __init__(self, **params: float) -> None:
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise ValueError(
                f"unknown {self.name} parameter(s) {sorted(unknown)}; "
                f"allowed: {sorted(self.defaults)}"
            )
        self.params = {**self.defaults, **{k: float(v) for k, v in params.items()}}

    def slot_initial_value(self, slot: str) -> float:
        """Value a fresh slot entry starts from."""
        return 0.0

    def init_slots(self, shape: tuple[int, ...], dtype: np.dtype) -> dict[str, np.ndarray]:
        """Allocate the slot arrays for a variable of `shape`."""
        return {s: np.full(shape, self.slot_initial_value(s), dtype=dtype) for s in self.slot_names}

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: int
    ) -> None:
        """Apply one update in place; `step` counts updates of this variable from 1."""
        raise NotImplementedError

    def apply_dense(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: int
    ) -> None:
        """Update a whole dense variable in place."""
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
        """Update the rows `rows` (unique indices) of `param` and its slots in place."""
        p = param[rows]
        gathered = {k: v[rows] for k, v in slots.items()}
        self.update(p, grad.astype(param.dtype, copy=False), gathered, step)
        param[rows] = p
        for k, v in gathered.items():
            slots[k][rows] = v

    def spec(self) -> tuple[str, dict[str, float]]:
        """Return (name, params), the form sent to the PS."""
        return self.name, dict(self.params)


class SGD(Optimizer):
    """w -= lr * g."""

    name = "sgd"
    defaults = {"learning_rate": 0.01}

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: int
    ) -> None:
        param -= self.params["learning_rate"] * grad


class Adagrad(Optimizer):
    """acc += g²; w -= lr * g / (sqrt(acc) + epsilon)."""

    name = "adagrad"
    slot_names = ("accumulator",)
    defaults = {"learning_rate": 0.03, "initial_accumulator": 1e-6, "epsilon": 1e-7}

    def slot_initial_value(self, slot: str) -> float:
        return self.params["initial_accumulator"]

    def update(
        self, param: np.ndarray, grad: np.ndarray, slots: Mapping[str, np.ndarray], step: int
    ) -> None:
        acc = slots["accumulator"]
        acc += grad * grad
        param -= self.params["learning_rate"] * grad / (np.sqrt(acc) + self.params["epsilon"])


OPTIMIZERS: dict[str, type[Optimizer]] = {cls.name: cls for cls in (SGD, Adagrad)}


def make_optimizer(name: str, params: Mapping[str, float] | None = None) -> Optimizer:
    """Build a registered optimizer by name, e.g. make_optimizer("adagrad", {"epsilon": 1e-8})."""
    try:
        cls = OPTIMIZERS[name.lower()]
    except KeyError:
        choices = sorted(OPTIMIZERS)
        raise ValueError(f"unknown optimizer {name!r}; choose one of {choices}") from None
    return cls(**dict(params or {}))
