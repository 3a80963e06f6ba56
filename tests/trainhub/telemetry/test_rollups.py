"""The rollup arithmetic alone: summaries of a batch, and the plan of a chart query."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st
from trainhub.telemetry.rollups import BITS, TOP, Span, Summary, buckets, cover, plan, rollup

STEPS = st.integers(min_value=-(10**7), max_value=10**7)


def _steps(span: Span) -> range:
    lo, hi = span.steps()
    return range(lo, hi + 1)


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), STEPS, st.floats(-1e6, 1e6)), max_size=60))
def test_every_level_summarizes_its_block_exactly(points: list[tuple[str, int, float]]) -> None:
    summaries = rollup(points)
    for level in range(1, TOP + 1):
        expected: dict[tuple[str, int], list[tuple[int, int, float]]] = {}
        for order, (name, step, value) in enumerate(points):
            expected.setdefault((name, step >> (BITS * level)), []).append((step, order, value))
        got = {(n, b): s for (n, k, b), s in summaries.items() if k == level}
        assert set(got) == set(expected)
        for key, members in expected.items():
            last = max(members)
            assert got[key] == Summary(
                min(v for *_, v in members),
                max(v for *_, v in members),
                len(members),
                last[0],
                last[2],
            )


@settings(deadline=None)
@given(st.integers(-(10**6), 10**6), st.integers(0, 10**6), st.integers(0, TOP))
def test_cover_tiles_a_range_with_aligned_blocks(x: int, length: int, top: int) -> None:
    # As a plan uses it: within one block of level top + 1.
    y = x + length % (1 << (BITS * (top + 1)))
    spans = cover(x, y, top)
    covered = [span.steps() for span in spans]
    assert covered[0][0] == x and covered[-1][1] == y
    assert all(a[1] + 1 == b[0] for a, b in pairwise(covered))
    assert all(span.level <= top for span in spans)
    # At most 15 blocks of each level on either side of the widest ones.
    assert sum(s.last - s.first + 1 for s in spans if s.level < top) <= 2 * 15 * top


bounds = st.one_of(st.none(), st.integers(-(10**9), 10**9))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-(10**9), 10**9),
    st.integers(0, 10**9),
    st.integers(10, 5000),
    bounds,
    bounds,
)
def test_a_plan_reads_each_step_of_the_range_once_in_at_most_n_buckets(
    first: int, length: int, n: int, start: int | None, end: int | None
) -> None:
    last = first + length
    p = plan("m", first=first, last=last, total=length * 2 + 1, max_points=n, start=start, end=end)
    lo = first if start is None else max(first, start)
    hi = last if end is None else min(last, end)
    if lo > hi:
        assert p is None
        return
    assert p is not None and (p.lo, p.hi) == (lo, hi)
    ranges = [span.steps() for span in p.spans]
    assert all(a[1] < b[0] for a, b in pairwise(ranges))
    # The spans cover lo..hi; what sticks out lies before `first` or after `last`.
    assert ranges[0][0] <= lo and ranges[-1][1] >= hi
    assert all(a[1] + 1 == b[0] for a, b in pairwise(ranges))
    assert ranges[0][0] == lo or lo == first
    assert ranges[-1][1] == hi or hi == last
    # Each block lies in one bucket, and there are at most n buckets.
    for span in p.spans:
        lo_step = span.steps()[0]
        size = 1 << (BITS * span.level)
        for block in (span.first, span.last):
            start_step = block * size
            assert p.bucket_of(start_step) == p.bucket_of(start_step + size - 1)
        assert lo_step >= p.origin
    assert p.bucket_of(hi) - p.bucket_of(lo) + 1 <= n
    # O(16 n) rows: the widest level's blocks plus the finer ones at the two cut ends.
    rows = sum(s.last - s.first + 1 for s in p.spans)
    assert rows <= 16 * n + 2 + 2 * 15 * TOP or rows <= hi - lo + 1


def test_a_short_range_is_read_raw_one_bucket_per_step() -> None:
    p = plan("m", first=0, last=10**6, total=10**6, max_points=100, start=500, end=599)
    assert p is not None
    assert p.width == 1 and p.spans == (Span(0, 500, 599),)


def test_a_series_of_few_points_is_read_raw_whatever_its_span() -> None:
    p = plan("m", first=0, last=10**9, total=50, max_points=100)
    assert p is not None and p.width == 1 and p.spans == (Span(0, 0, 10**9),)


def test_a_million_steps_in_a_thousand_buckets_read_level_two() -> None:
    p = plan("m", first=1, last=10**6, total=10**6, max_points=1000)
    assert p is not None and p.spans == (Span(2, 0, 10**6 >> 8),)
    assert p.width == 4 * 256  # 3,907 blocks of 256 steps, four per bucket


def test_buckets_fold_blocks_in_step_order() -> None:
    p = plan("m", first=0, last=255, total=256, max_points=10)
    assert p is not None and p.spans == (Span(1, 0, 15),) and p.width == 32
    rows = [(1, b, Summary(float(b), float(b) + 1, 16, b * 16 + 15, float(b))) for b in range(16)]
    out = buckets(p, reversed(rows))
    assert len(out) == 8
    assert out[0] == Summary(0.0, 2.0, 32, 31, 1.0)
    assert out[-1] == Summary(14.0, 16.0, 32, 255, 15.0)
