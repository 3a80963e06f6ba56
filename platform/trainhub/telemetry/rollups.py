"""Rollups of a metric for charts: the arithmetic, free of the database.

A metric's raw points are kept (as chunks, `chunks.py`); beside them, level `k`
(1..TOP) holds one summary per aligned block of 16**k steps — block `b` covers steps
`b * 16**k .. (b+1) * 16**k - 1` — with the block's min, max, point count and last
point (the highest step; among points of one step, the one that arrived last).
Level 0 is the raw points themselves.

A chart query for at most N buckets over steps `a..b` reads the finest level whose blocks
over the range number at most 16·N, groups m of those blocks per bucket (m ≤ 16), and,
when `a` or `b` cuts a block in two, covers the cut part with blocks of lower levels
(at most 15 per level on each side) — so it reads O(16·N) rows whatever the range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .codec import Columns

BITS = 4  # log2 of the fan-out: each level's blocks are 16 times wider than the last's
TOP = 8  # the widest level: blocks of 16**8 (about 4.3 billion) steps


@dataclass(slots=True)
class Summary:
    """Min, max, count and last point of the points of one block or bucket."""

    min: float
    max: float
    count: int
    last_step: int
    last_value: float

    @classmethod
    def of_point(cls, step: int, value: float) -> Summary:
        return cls(value, value, 1, step, value)

    def add(self, other: Summary) -> None:
        """Fold in `other`, which arrived after (or lies after) what is summarized here."""
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.count += other.count
        if other.last_step >= self.last_step:
            self.last_step = other.last_step
            self.last_value = other.last_value

    def as_bucket(self) -> dict[str, float | int]:
        """The API's shape of one bucket: its last point, min, max and count."""
        return {
            "step": self.last_step,
            "value": self.last_value,
            "min": self.min,
            "max": self.max,
            "count": self.count,
        }


RollupKey = tuple[str, int, int]  # (name, level, block)


def rollup(points: Iterable[tuple[str, int, float]]) -> dict[RollupKey, Summary]:
    """The summaries of every level that a batch of `(name, step, value)` points touches.

    Points are taken in arrival order. Level 1 is built from the points, each further
    level from the one below, so a batch of n consecutive steps costs about n + n/15 steps.
    """
    level: dict[RollupKey, Summary] = {}
    for name, step, value in points:
        key = (name, 1, step >> BITS)
        point = Summary.of_point(step, value)
        found = level.get(key)
        if found is None:
            level[key] = point
        else:
            found.add(point)
    out = dict(level)
    for k in range(2, TOP + 1):
        upper: dict[RollupKey, Summary] = {}
        for (name, _, block), summary in level.items():
            key = (name, k, block >> BITS)
            found = upper.get(key)
            if found is None:
                upper[key] = Summary(
                    summary.min,
                    summary.max,
                    summary.count,
                    summary.last_step,
                    summary.last_value,
                )
            else:
                found.add(summary)
        out.update(upper)
        level = upper
    return out


def rollup_columns(series: Mapping[str, Columns]) -> dict[RollupKey, Summary]:
    """`rollup` of a batch held as columns per name, with array operations: the points
    ordered by step (stably, so the last of one step is the last that arrived), then per
    level the runs of one block reduced at once. The same summaries as `rollup`."""
    out: dict[RollupKey, Summary] = {}
    for name, columns in series.items():
        if not len(columns):
            continue
        ordered = columns.by_step()
        steps, values = ordered.steps, ordered.values
        for k in range(1, TOP + 1):
            blocks = steps >> (BITS * k)
            starts = np.flatnonzero(np.concatenate(([True], blocks[1:] != blocks[:-1])))
            ends = np.append(starts[1:], len(steps)) - 1
            lows = np.minimum.reduceat(values, starts).tolist()
            highs = np.maximum.reduceat(values, starts).tolist()
            counts = (ends - starts + 1).tolist()
            last_steps = steps[ends].tolist()
            last_values = values[ends].tolist()
            for i, block in enumerate(blocks[starts].tolist()):
                out[(name, k, block)] = Summary(
                    lows[i], highs[i], counts[i], last_steps[i], last_values[i]
                )
    return out


@dataclass(frozen=True, slots=True)
class Span:
    """Blocks `first..last` of one level (level 0: the raw points of steps first..last)."""

    level: int
    first: int
    last: int

    def steps(self) -> tuple[int, int]:
        """The steps the span covers, inclusive."""
        shift = BITS * self.level
        return self.first << shift, ((self.last + 1) << shift) - 1


@dataclass(frozen=True, slots=True)
class Plan:
    """How to read one metric for a chart: which blocks, and how to bucket them.

    Bucket `i` covers steps `origin + i * width .. origin + (i+1) * width - 1` (clipped
    to `lo..hi`); every block the spans name lies inside one bucket.
    """

    name: str
    lo: int
    hi: int
    origin: int
    width: int
    spans: tuple[Span, ...]
    level: int = 0  # the widest level read: its blocks are grouped `width` steps at a time

    def bucket_of(self, step: int) -> int:
        return (step - self.origin) // self.width


def plan(
    name: str,
    *,
    first: int,
    last: int,
    total: int,
    max_points: int,
    start: int | None = None,
    end: int | None = None,
    min_level: int = 0,
) -> Plan | None:
    """The read of metric `name` (steps `first..last`, `total` points) for a chart of at
    most `max_points` buckets over steps `start..end`; None when the range holds no step.

    A range with no more steps or points than `max_points` is read raw, one bucket per
    step. With `min_level` (raw points deleted by retention), only blocks of that level
    or wider are read: the range is widened to whole blocks of it.
    """
    lo = first if start is None else max(start, first)
    hi = last if end is None else min(end, last)
    if lo > hi:
        return None
    if min_level:
        lo, hi = lo & -(1 << (BITS * min_level)), hi | ((1 << (BITS * min_level)) - 1)
    span = hi - lo + 1
    if not min_level and (span <= max_points or total <= max_points):
        return raw_plan(name, lo, hi)
    k = min_level
    while k < TOP and max_points << (BITS * (k + 1)) <= span:
        k += 1
    shift = BITS * k
    unit = 1 << shift
    first_block, last_block = lo >> shift, hi >> shift
    per_bucket = -(-(last_block - first_block + 1) // max_points)
    # A bound inside a block that may hold points outside the range: cover that part
    # with finer blocks. Nothing lies before `first` or after `last`, so a block that
    # only sticks out past those is read whole.
    cut_lo = lo != first and lo & (unit - 1) != 0
    cut_hi = hi != last and (hi + 1) & (unit - 1) != 0
    spans: list[Span] = []
    tail: list[Span] = []
    if first_block == last_block and (cut_lo or cut_hi):
        x = lo if cut_lo else first_block << shift
        y = hi if cut_hi else ((first_block + 1) << shift) - 1
        spans = cover(x, y, k - 1)
    else:
        inner_first, inner_last = first_block, last_block
        if cut_lo:
            spans = cover(lo, ((first_block + 1) << shift) - 1, k - 1)
            inner_first += 1
        if cut_hi:
            tail = cover(last_block << shift, hi, k - 1)
            inner_last -= 1
        if inner_first <= inner_last:
            spans.append(Span(k, inner_first, inner_last))
        spans.extend(tail)
    return Plan(name, lo, hi, first_block << shift, per_bucket * unit, tuple(spans), k)


def raw_plan(name: str, lo: int, hi: int) -> Plan:
    """Every raw point of steps `lo..hi`, one bucket per step."""
    return Plan(name, lo, hi, lo, 1, (Span(0, lo, hi),))


def cover(x: int, y: int, top: int) -> list[Span]:
    """Aligned blocks of levels 0..`top` that tile steps `x..y` exactly, as spans."""
    spans: list[Span] = []
    while x <= y:
        k = 0
        while k < top:
            size = 1 << (BITS * (k + 1))
            if x % size or x + size - 1 > y:
                break
            k += 1
        block = x >> (BITS * k)
        if spans and spans[-1].level == k and spans[-1].last == block - 1:
            spans[-1] = Span(k, spans[-1].first, block)
        else:
            spans.append(Span(k, block, block))
        x += 1 << (BITS * k)
    return spans


Row = tuple[int, int, Summary]  # (level, block or step, summary)


def buckets(p: Plan, rows: Iterable[Row]) -> list[Summary]:
    """The chart's buckets, in step order, from the rows that `p`'s spans read.

    Rows of one step (raw points) must come in arrival order.
    """
    ordered = sorted(rows, key=lambda row: row[1] << (BITS * row[0]))
    out: list[Summary] = []
    current = -1
    for level, block, summary in ordered:
        index = p.bucket_of(block << (BITS * level))
        if out and index == current:
            out[-1].add(summary)
        else:
            out.append(
                Summary(
                    summary.min,
                    summary.max,
                    summary.count,
                    summary.last_step,
                    summary.last_value,
                )
            )
            current = index
    return out
