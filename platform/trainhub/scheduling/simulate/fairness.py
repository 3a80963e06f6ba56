"""Fairness as the simulator measures it: each team's share against its entitlement.

A team's entitlement at an instant is its nominal quota share plus its fair part of the
capacity other teams leave idle: a weighted max-min (water-filling) split of the whole
cluster among the teams that have work, weighted by quota share, where no team is given
more than it asks for (what it holds plus the minimum size of what it has waiting) nor
more than its quota plus its borrowing limit. Shares are dominant-resource shares of the
cluster. Over a run, a team's `share_vs_entitlement` is ∫share ÷ ∫entitlement over the
time it has work; Jain's index over those ratios is the simulator's fairness figure
(`jain_basis: "entitlement"`). The older figure, ∫share ÷ quota share, is kept beside it
(`jain_fairness_quota`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

EPSILON = 1e-12


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n when one gets everything."""
    if not values:
        return 1.0
    total, squares = sum(values), sum(v * v for v in values)
    return 1.0 if squares == 0 else total * total / (len(values) * squares)


def dominant_share(used: Sequence[float], capacity: Sequence[float]) -> float:
    return max((u / c for u, c in zip(used, capacity, strict=True) if c > 0), default=0.0)


def limit_share(
    nominal: Sequence[float], borrowing_limit: Sequence[float], capacity: Sequence[float]
) -> float:
    """The most a team may hold, as a share of the cluster: quota plus borrowing limit on
    its tightest resource (1 when nothing limits it)."""
    shares = [
        (n + b) / c
        for n, b, c in zip(nominal, borrowing_limit, capacity, strict=True)
        if c > 0 and math.isfinite(b)
    ]
    return min([1.0, *shares])


def entitlements(
    weights: Mapping[str, float], caps: Mapping[str, float], total: float = 1.0
) -> dict[str, float]:
    """Weighted max-min split of `total` among `weights`' teams, none above its cap.

    Teams with zero weight share what the weighted teams cannot use, equally.
    """
    out = {name: 0.0 for name in weights}
    left = total
    for tier in (
        [n for n in weights if weights[n] > 0],
        [n for n in weights if weights[n] <= 0],
    ):
        open_ = [n for n in tier if caps[n] > EPSILON]
        while open_ and left > EPSILON:
            w = {n: weights[n] if weights[n] > 0 else 1.0 for n in open_}
            per = left / sum(w.values())
            capped = [n for n in open_ if caps[n] - out[n] <= per * w[n] + EPSILON]
            if not capped:
                for n in open_:
                    out[n] += per * w[n]
                left = 0.0
                break
            for n in capped:
                left -= caps[n] - out[n]
                out[n] = caps[n]
            open_ = [n for n in open_ if n not in capped]
    return out


__all__ = ["dominant_share", "entitlements", "jain", "limit_share"]
