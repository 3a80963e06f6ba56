"""Each searched parameter against an experiment's metric, as small scatter plots drawn on
the server (`web/partials/experiment_params.html` writes them as SVG): one plot per
parameter, x the trial's value (on a log scale for `log_uniform`, one slot per value for
`categorical`), y the trial's best metric, the best trial marked. Pure geometry here; the
colours come from the page's CSS variables, so the plots follow light and dark."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainhub.experiments.searchspec import Param

WIDTH, HEIGHT = 320, 200
# The plot area inside the SVG: room for the y ticks on the left and x ticks below.
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 12, 34


@dataclass(frozen=True)
class TrialPoint:
    """What a plot reads of one trial."""

    number: int
    params: Mapping[str, Any]
    metric: float | None


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    number: int
    label: str  # the trial, its value and its metric, in words (the point's tooltip)
    best: bool


@dataclass(frozen=True)
class Tick:
    at: float  # pixels along its axis
    text: str


@dataclass(frozen=True)
class ParamPlot:
    name: str
    scale: str  # "linear", "log" or "categories"
    points: tuple[Point, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    description: str
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


def number_text(value: Any) -> str:
    """A parameter or metric value as the pages show it: floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def param_plots(
    params: Iterable[Param],
    trials: Iterable[TrialPoint],
    *,
    metric: str,
    goal: str,
    best: int | None,
) -> list[ParamPlot]:
    """One plot per parameter, over the trials that reported the metric (none: no plots)."""
    scored = [t for t in trials if t.metric is not None and math.isfinite(t.metric)]
    if not scored:
        return []
    low = min(t.metric for t in scored if t.metric is not None)
    high = max(t.metric for t in scored if t.metric is not None)
    if low == high:
        pad = abs(low) * 0.05 or 1.0
        low, high = low - pad, high + pad
    y_of = _linear(low, high, HEIGHT - BOTTOM, TOP)
    y_ticks = tuple(Tick(y_of(v), number_text(v)) for v in (low, (low + high) / 2, high))
    better = "lower" if goal == "minimize" else "higher"
    plots = []
    for param in params:
        x_of, x_ticks, scale = _x_axis(param)
        points = []
        for t in scored:
            value = t.params.get(param.name)
            x = x_of(value, t.number)
            if x is None or t.metric is None:
                continue
            label = (
                f"trial {t.number}: {param.name} {number_text(value)}, "
                f"{metric} {number_text(t.metric)}"
            )
            points.append(Point(x, y_of(t.metric), t.number, label, t.number == best))
        plots.append(
            ParamPlot(
                name=param.name,
                scale=scale,
                points=tuple(points),
                x_ticks=x_ticks,
                y_ticks=y_ticks,
                description=(
                    f"{len(points)} trial{'s' if len(points) != 1 else ''}: {metric} "
                    f"({better} is better) against {param.name}"
                    + (f", on a log scale from {number_text(param.low)}" if scale == "log" else "")
                    + (f"; the best is trial {best}" if best is not None else "")
                    + "."
                ),
            )
        )
    return plots


Place = Callable[[Any, int], float | None]  # a value (and its trial's number) to pixels


def _linear(low: float, high: float, start: float, end: float) -> Callable[[float], float]:
    def at(value: float) -> float:
        return round(start + (value - low) / (high - low) * (end - start), 1)

    return at


def _x_axis(param: Param) -> tuple[Place, tuple[Tick, ...], str]:
    """Where a value of `param` sits on the x axis (None: not on it), its ticks, its scale."""
    start, end = LEFT, WIDTH - RIGHT
    if param.type == "categorical":
        values = list(param.values)
        slot = (end - start) / len(values)
        ticks = tuple(
            Tick(round(start + (i + 0.5) * slot, 1), _short(number_text(v)))
            for i, v in enumerate(values)
        )

        def category(value: Any, number: int) -> float | None:
            if value not in values:
                return None
            return round(start + (values.index(value) + 0.5) * slot + _jitter(number), 1)

        return category, ticks, "categories"
    log = param.type == "log_uniform"
    low, high = (math.log10(param.low), math.log10(param.high)) if log else (param.low, param.high)
    place = _linear(low, high, start, end)

    def numeric(value: Any, number: int) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if log and value <= 0:
            return None
        return float(place(math.log10(value) if log else value))

    middle = math.sqrt(param.low * param.high) if log else (param.low + param.high) / 2
    ticks = tuple(
        Tick(float(place(math.log10(v) if log else v)), number_text(v))
        for v in (param.low, middle, param.high)
    )
    return numeric, ticks, "log" if log else "linear"


def _jitter(number: int) -> float:
    """A small offset by trial number: trials at one value spread a little, so each point
    shows, and a point stays where it was from one refresh to the next."""
    return float((number * 5 % 9 - 4) * 2)


def _short(text: str, limit: int = 10) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
