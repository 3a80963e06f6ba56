"""What an experiment does next: start a trial, promote one, or wait. Pure Python.

The searchers keep no state of their own: each decision is made from the trials as they
stand (`TrialView`), so the control plane can decide again after any restart, and the
bench (`bench/search.py`) drives the very same functions without a database.

- `grid`: the product of every parameter's values (`grid_points` per range), in order.
- `random`: independent samples; when every parameter has finitely many values and the
  space holds `max_trials` of them, distinct ones (a seeded permutation of the grid).
- `asha`: asynchronous successive halving (Li et al., MLSys 2020). Trials start at the
  lowest rung; a trial that completes rung k waits there, and whenever a slot is free the
  best waiting trial in the top 1/eta of rung k's results (highest rung first) is promoted
  to rung k+1, resuming from its checkpoint; otherwise a new trial starts. Trials never
  promoted stop early.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .searchspec import Param, SearchSpec

# A trial's status as the searcher sees it.
RUNNING = "running"  # toward its rung (pending or placed: it holds a slot)
WAITING = "waiting"  # completed its rung; may be promoted (ASHA)
DONE = "done"  # completed the last rung
FAILED = "failed"
CANCELLED = "cancelled"


@dataclass(frozen=True)
class TrialView:
    number: int
    status: str
    rung: int  # the rung it runs toward (RUNNING) or completed last
    results: Mapping[int, float] = field(default_factory=dict)  # rung -> metric at its budget


@dataclass(frozen=True)
class Start:
    number: int
    params: dict[str, Any]


@dataclass(frozen=True)
class Promote:
    number: int
    rung: int  # the rung it now runs toward


Action = Start | Promote


def _values(p: Param, points: int) -> list[Any]:
    if p.type == "categorical":
        return list(p.values)
    if p.type == "int":
        count = min(points, int(p.high) - int(p.low) + 1)
        return sorted({int(v) for v in np.rint(np.linspace(p.low, p.high, count))})
    if p.type == "log_uniform":
        return [float(v) for v in np.geomspace(p.low, p.high, points)]
    return [float(v) for v in np.linspace(p.low, p.high, points)]


def grid(spec: SearchSpec) -> list[dict[str, Any]]:
    """Every point of the grid, the first parameter varying slowest."""
    axes = [_values(p, spec.grid_points) for p in spec.params]
    names = [p.name for p in spec.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]


def _sample(p: Param, rng: np.random.Generator) -> Any:
    if p.type == "categorical":
        return p.values[int(rng.integers(len(p.values)))]
    if p.type == "int":
        return int(rng.integers(int(p.low), int(p.high) + 1))
    if p.type == "log_uniform":
        return float(math.exp(rng.uniform(math.log(p.low), math.log(p.high))))
    return float(rng.uniform(p.low, p.high))


# A finite space up to this size is permuted whole; a larger one is sampled by index.
PERMUTE_UP_TO = 100_000


def _every_value(spec: SearchSpec) -> list[Sequence[Any]] | None:
    """Every value of each parameter when all have finitely many (None otherwise); ranges
    stay `range` objects, never lists."""
    axes: list[Sequence[Any]] = []
    for p in spec.params:
        if p.type == "categorical":
            axes.append(p.values)
        elif p.type == "int":
            axes.append(range(int(p.low), int(p.high) + 1))
        else:
            return None
    return axes


def _point(axes: list[Sequence[Any]], index: int) -> list[Any]:
    """The `index`-th point of the product of `axes`, the first varying slowest."""
    values = []
    for axis in reversed(axes):
        index, at = divmod(index, len(axis))
        values.append(axis[at])
    return values[::-1]


def trial_params(spec: SearchSpec, number: int) -> dict[str, Any]:
    """The values of trial `number` (1-based); the same for the same spec, always. In a
    finite space that holds `max_trials` points, no two trials get the same."""
    names = [p.name for p in spec.params]
    if spec.method == "grid":
        return grid(spec)[number - 1]
    axes = _every_value(spec)
    size = math.prod(len(a) for a in axes) if axes is not None else 0
    if axes is not None and spec.max_trials <= size < 2**62:
        rng = np.random.default_rng(spec.seed)
        if size <= PERMUTE_UP_TO:
            index = int(rng.permutation(size)[number - 1])
        else:
            index = int(rng.choice(size, spec.max_trials, replace=False)[number - 1])
        return dict(zip(names, _point(axes, index), strict=True))
    rng = np.random.default_rng([spec.seed, number])
    return {p.name: _sample(p, rng) for p in spec.params}


def _ranked(spec: SearchSpec, trials: Sequence[TrialView], rung: int) -> list[TrialView]:
    done = [t for t in trials if rung in t.results]
    sign = 1.0 if spec.goal == "minimize" else -1.0
    return sorted(done, key=lambda t: (sign * t.results[rung], t.number))


def _promotion(spec: SearchSpec, trials: Sequence[TrialView]) -> Promote | None:
    top_rung = len(spec.rungs()) - 1
    for rung in range(top_rung - 1, -1, -1):
        ranked = _ranked(spec, trials, rung)
        for t in ranked[: len(ranked) // spec.reduction_factor]:
            if t.status == WAITING and t.rung == rung:
                return Promote(t.number, rung + 1)
    return None


def next_actions(spec: SearchSpec, trials: Sequence[TrialView]) -> list[Action]:
    """What to do now, filling the slots `max_concurrent` leaves free."""
    views = {t.number: t for t in trials}
    actions: list[Action] = []
    while sum(t.status == RUNNING for t in views.values()) < spec.max_concurrent:
        promote = _promotion(spec, list(views.values())) if spec.method == "asha" else None
        action: Action
        if promote is not None:
            old = views[promote.number]
            views[promote.number] = TrialView(old.number, RUNNING, promote.rung, old.results)
            action = promote
        elif len(views) < spec.max_trials:
            number = len(views) + 1
            action = Start(number, trial_params(spec, number))
            views[number] = TrialView(number, RUNNING, 0)
        else:
            break
        actions.append(action)
    return actions


def finished(spec: SearchSpec, trials: Sequence[TrialView]) -> bool:
    """Whether the search has nothing left to run or decide."""
    if any(t.status == RUNNING for t in trials):
        return False
    return not next_actions(spec, trials)


def best(spec: SearchSpec, trials: Sequence[TrialView]) -> tuple[int, int, float] | None:
    """The best result so far: (trial number, rung, metric); the highest rung breaks ties."""
    found: tuple[int, int, float] | None = None
    for t in trials:
        for rung, value in t.results.items():
            if (
                found is None
                or spec.better(value, found[2])
                or (value == found[2] and rung > found[1])
            ):
                found = (t.number, rung, value)
    return found
