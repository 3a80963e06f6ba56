"""An experiment's `search:` block as typed, immutable data, checked field by field.

Pure Python (no Django): the searchers, the bench (`bench/search.py`) and the API's
validation all read it. `SearchSpec.from_dict` collects every problem, each under the
path of its field (`search.params.lr.low`), and raises them together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

METHODS = ("random", "grid", "asha")
GOALS = ("minimize", "maximize")
PARAM_TYPES = ("uniform", "log_uniform", "int", "categorical")
# What a trial's length is measured in, and the metric whose reports count it.
BUDGET_METRICS = {"epochs": "epoch", "steps": "step"}
MAX_TRIALS = 1000
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class SearchSpecError(ValueError):
    """Invalid fields: `errors` maps each field's path to what is wrong with it."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class Param:
    """One hyperparameter: a range (`uniform`, `log_uniform`, `int`) or a list of values."""

    name: str
    type: str
    low: float = 0.0
    high: float = 0.0
    values: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        if self.type == "categorical":
            return {"type": self.type, "values": list(self.values)}
        low, high = (int(self.low), int(self.high)) if self.type == "int" else (self.low, self.high)
        return {"type": self.type, "low": low, "high": high}


@dataclass(frozen=True)
class SearchSpec:
    """How an experiment searches. `max_budget` is a trial's full length in `budget` units
    (passed to the trial as its `budget_arg` argument); ASHA's rungs are `min_budget`,
    `min_budget x reduction_factor`, ... up to it."""

    method: str
    metric: str
    params: tuple[Param, ...]
    goal: str = "minimize"
    max_trials: int = 16
    max_concurrent: int = 2
    budget: str = "epochs"
    budget_arg: str = "epochs"
    max_budget: int | None = None
    min_budget: int = 1
    reduction_factor: int = 3
    max_failed_trials: int = 3
    grid_points: int = 3
    seed: int = 0

    @property
    def budget_metric(self) -> str:
        return BUDGET_METRICS[self.budget]

    def better(self, a: float, b: float) -> bool:
        """Whether metric value `a` is better than `b`."""
        return a < b if self.goal == "minimize" else a > b

    def rungs(self) -> tuple[int, ...]:
        """Each rung's budget, lowest first; one rung (the full length) but for ASHA."""
        if self.max_budget is None:
            return (0,)  # the trial runs as its spec says
        if self.method != "asha":
            return (self.max_budget,)
        budgets, b = [], self.min_budget
        while b < self.max_budget:
            budgets.append(b)
            b *= self.reduction_factor
        return (*budgets, self.max_budget)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "metric": self.metric,
            "goal": self.goal,
            "max_trials": self.max_trials,
            "max_concurrent": self.max_concurrent,
            "budget": self.budget,
            "budget_arg": self.budget_arg,
            "max_budget": self.max_budget,
            "min_budget": self.min_budget,
            "reduction_factor": self.reduction_factor,
            "max_failed_trials": self.max_failed_trials,
            "grid_points": self.grid_points,
            "seed": self.seed,
            "params": {p.name: p.to_dict() for p in self.params},
        }
        return out

    @classmethod
    def from_dict(cls, data: Any) -> SearchSpec:
        """Check and type a `search:` block; raise `SearchSpecError` naming every bad field."""
        errors: dict[str, str] = {}
        if not isinstance(data, Mapping):
            raise SearchSpecError({"search": "must be a mapping"})
        known = set(cls.__dataclass_fields__) - {"params"} | {"params"}
        for key in data:
            if key not in known:
                errors[f"search.{key}"] = f"unknown field; expected one of {sorted(known)}"
        reader = _Reader(data, errors)
        method = reader.choice("method", METHODS, None)
        metric = reader.text("metric")
        goal = reader.choice("goal", GOALS, "minimize")
        budget = reader.choice("budget", tuple(BUDGET_METRICS), "epochs")
        budget_arg = reader.text("budget_arg", default=budget or "epochs")
        max_budget = reader.integer("max_budget", None, 1, 10**9)
        min_budget = reader.integer("min_budget", 1, 1, 10**9)
        reduction = reader.integer("reduction_factor", 3, 2, 100)
        max_concurrent = reader.integer("max_concurrent", 2, 1, 100)
        max_failed = reader.integer("max_failed_trials", 3, 0, MAX_TRIALS)
        grid_points = reader.integer("grid_points", 3, 1, 100)
        seed = reader.integer("seed", 0, 0, 2**32 - 1)
        params = _params(data.get("params"), errors)
        default_trials = _grid_size(params, grid_points or 3) if method == "grid" else 16
        max_trials = reader.integer("max_trials", min(default_trials, MAX_TRIALS), 1, MAX_TRIALS)
        if method == "asha":
            if max_budget is None and "search.max_budget" not in errors:
                errors["search.max_budget"] = (
                    "required for asha: a trial's full length in budget units"
                )
            elif max_budget is not None and min_budget is not None and min_budget > max_budget:
                errors["search.min_budget"] = f"must be at most max_budget ({max_budget})"
        if method == "grid" and params and max_trials is not None and grid_points is not None:
            size = _grid_size(params, grid_points)
            if size > MAX_TRIALS:
                errors["search.params"] = (
                    f"the grid has {size} points, more than the {MAX_TRIALS} trials an "
                    "experiment may run: fewer values, or a lower grid_points"
                )
            elif max_trials < size:
                errors["search.max_trials"] = (
                    f"the grid has {size} points; raise max_trials to {size} or narrow params"
                )
        if errors:
            raise SearchSpecError(errors)
        assert method is not None and metric is not None and goal is not None
        assert budget is not None and budget_arg is not None
        return cls(
            method=method,
            metric=metric,
            params=tuple(params),
            goal=goal,
            max_trials=_int(max_trials),
            max_concurrent=_int(max_concurrent),
            budget=budget,
            budget_arg=budget_arg,
            max_budget=max_budget,
            min_budget=_int(min_budget),
            reduction_factor=_int(reduction),
            max_failed_trials=_int(max_failed),
            grid_points=_int(grid_points),
            seed=_int(seed),
        )


def _int(value: int | None) -> int:
    assert value is not None
    return value


def _grid_size(params: list[Param], points: int) -> int:
    size = 1
    for p in params:
        if p.type == "categorical":
            size *= len(p.values)
        elif p.type == "int":
            size *= min(points, int(p.high) - int(p.low) + 1)
        else:
            size *= points
    return size


class _Reader:
    def __init__(self, data: Mapping[str, Any], errors: dict[str, str]) -> None:
        self.data, self.errors = data, errors

    def choice(self, key: str, choices: tuple[str, ...], default: str | None) -> str | None:
        value = self.data.get(key, default)
        if value not in choices:
            missing = "required" if value is None else f"{value!r} is not one"
            self.errors[f"search.{key}"] = f"{missing}; expected one of {', '.join(choices)}"
            return None
        return str(value)

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key, default)
        if not isinstance(value, str) or not value or len(value) > 100:
            self.errors[f"search.{key}"] = "required: a name of up to 100 characters"
            return None
        return value

    def integer(self, key: str, default: int | None, low: int, high: int) -> int | None:
        value = self.data.get(key, default)
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.errors[f"search.{key}"] = f"must be a whole number from {low} to {high}"
            return None
        return value


def _params(data: Any, errors: dict[str, str]) -> list[Param]:
    if not isinstance(data, Mapping) or not data:
        errors["search.params"] = (
            "required: a mapping of argument names to {type: uniform|log_uniform|int|"
            "categorical, low, high} or {type: categorical, values: [...]}"
        )
        return []
    params = []
    for name, body in data.items():
        path = f"search.params.{name}"
        if not isinstance(name, str) or not name or not set(name) <= NAME_CHARS:
            errors[path] = "a parameter's name is a job argument: letters, digits and _"
            continue
        if not isinstance(body, Mapping):
            errors[path] = "must be a mapping with a type"
            continue
        kind = body.get("type")
        if kind not in PARAM_TYPES:
            errors[f"{path}.type"] = f"expected one of {', '.join(PARAM_TYPES)}"
            continue
        if kind == "categorical":
            values = body.get("values")
            ok = isinstance(values, list) and values and all(_plain_value(v) for v in values)
            if not ok:
                errors[f"{path}.values"] = (
                    "required: a non-empty list of finite numbers, strings (up to 200 "
                    "characters) or booleans"
                )
                continue
            params.append(Param(name, kind, values=tuple(values)))  # type: ignore[arg-type]
            continue
        bounds: list[Any] = []
        for key in ("low", "high"):
            v = body.get(key)
            whole = isinstance(v, int) and not isinstance(v, bool) and abs(v) <= 2**53
            number = whole or (isinstance(v, float) and math.isfinite(v))
            if not number or (kind == "int" and not whole):
                want = "a whole number" if kind == "int" else "a number"
                errors[f"{path}.{key}"] = f"required: {want}"
            bounds.append(v)
        if f"{path}.low" in errors or f"{path}.high" in errors:
            continue
        low, high = float(bounds[0]), float(bounds[1])
        if low >= high:
            errors[f"{path}.high"] = f"must be above low ({bounds[0]})"
        elif kind == "log_uniform" and low <= 0:
            errors[f"{path}.low"] = "must be above 0 for log_uniform"
        else:
            params.append(Param(name, kind, low, high))
    return params


def _plain_value(value: Any) -> bool:
    """A categorical value a job argument and a JSON column take as they are."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= 200 and "\x00" not in value
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= 2**53
    return isinstance(value, bool)
