"""Each run's final and best value per metric: what a comparison of runs reads first.

"Best" needs a direction. A metric named like a loss or an error (`loss`, `rmse`, `mae`,
`error`…) is better lower; one named like a score (`auc`, `accuracy`, `ndcg`, `recall`…) is
better higher; for any other name no best is claimed (its range is shown instead).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .models import MetricRollup
from .rollups import TOP

_LOWER = re.compile(r"loss|rmse|mse|mae|error|err\b|perplexity|latency|seconds|regret")
_HIGHER = re.compile(r"auc|acc|precision|recall|f1|ndcg|hit|map\b|reward|per_sec|throughput")


def better(name: str) -> str:
    """ "lower", "higher" or "" (unknown) for a metric's name."""
    lowered = name.lower()
    if _LOWER.search(lowered):
        return "lower"
    if _HIGHER.search(lowered):
        return "higher"
    return ""


@dataclass(frozen=True)
class Final:
    """One job's points of one metric, summed up."""

    last: float  # the value at the highest step
    last_step: int
    low: float
    high: float
    points: int

    def best(self, direction: str) -> float | None:
        return {"lower": self.low, "higher": self.high}.get(direction)


@dataclass(frozen=True)
class MetricRow:
    """A metric across the compared jobs (in their order; None: the job has no point)."""

    name: str
    direction: str
    finals: tuple[Final | None, ...]
    best_job: int | None  # index into `finals` of the best run, when a best is claimed

    @property
    def cells(self) -> list[Cell | None]:
        """The row as a page prints it, a cell per job (None: no points)."""
        cells: list[Cell | None] = []
        for i, f in enumerate(self.finals):
            if f is None:
                cells.append(None)
                continue
            best = f.best(self.direction)
            cells.append(
                Cell(
                    final=shown(f.last),
                    step=f.last_step,
                    best=None if best is None else shown(best),
                    range=f"{shown(f.low)} to {shown(f.high)}",
                    is_best=i == self.best_job,
                )
            )
        return cells


@dataclass(frozen=True)
class Cell:
    final: str
    step: int
    best: str | None
    range: str
    is_best: bool


def shown(value: float) -> str:
    """4 significant digits (0.9215, 12.5), whole numbers with thousands from 10,000."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"


def final_values(job_ids: Sequence[int], names: Sequence[str] | None = None) -> list[MetricRow]:
    """Per metric (by name; only `names` when given), each job's final, lowest and highest
    value; one query, of the widest rollups (every step lies in one of their blocks), so
    it reads no raw points and still answers once retention deleted those."""
    rollups = MetricRollup.objects.filter(job_id__in=job_ids, level=TOP)
    if names is not None:
        rollups = rollups.filter(name__in=names)
    found: dict[str, dict[int, Final]] = {}
    rows = rollups.order_by("job_id", "name", "block").values_list(
        "job_id", "name", "min_value", "max_value", "count", "last_step", "last_value"
    )
    for job_id, name, low, high, count, last_step, last_value in rows:
        seen = found.setdefault(name, {}).get(job_id)
        if seen is None:
            found[name][job_id] = Final(
                last=last_value, last_step=last_step, low=low, high=high, points=count
            )
        else:  # a later block: its last point is later
            found[name][job_id] = Final(
                last=last_value,
                last_step=last_step,
                low=min(seen.low, low),
                high=max(seen.high, high),
                points=seen.points + count,
            )
    table = []
    for name in sorted(found):
        direction = better(name)
        finals = tuple(found[name].get(job_id) for job_id in job_ids)
        bests = [(f.best(direction), i) for i, f in enumerate(finals) if f is not None]
        best_job = None
        if direction and len(bests) > 1:
            pick = min if direction == "lower" else max
            best_job = pick(bests, key=lambda b: b[0] if b[0] is not None else 0.0)[1]
        table.append(MetricRow(name, direction, finals, best_job))
    return table
