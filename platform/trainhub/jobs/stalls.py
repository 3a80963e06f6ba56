"""Whether a running job is stalled: the spec's `stall:` section and the detector (pure).

A job is stalled when none of its tasks made progress — a metric step beyond its
highest, or its coordinator's completed closures (telemetry records both, `progress.py`)
— for longer than its limit, `max(floor_seconds, k * p95)` of its own recent intervals
between progresses. Time in a phase the runtime marks (an evaluation, a checkpoint:
`ps_runtime.phase`) does not count, up to `max_phase_seconds` since the last progress.
A job is judged only once it has `MIN_INTERVALS` intervals, and only from its first
progress after it last (re)started running. What the platform then does is
`services/stalls.py`; docs/design.md §"Stall detection".

    stall:
      k: 2                      # the limit is k times the p95 interval between progresses …
      floor_seconds: 20         # … and never below this
      grace_seconds: 60         # stalled this much longer: `on_stall` happens
      on_stall: restart         # restart (from the last checkpoint) | stop | notify
      max_phase_seconds: 3600   # a phase longer than this counts as no progress again
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

# Intervals a job needs before it is judged: its p95 means something, and a job that has
# not got going (loading data, building its first batches) is not called stalled.
MIN_INTERVALS = 3
# The recent intervals kept per job (the p95 of 32 is their second largest).
WINDOW = 32


class OnStall(StrEnum):
    RESTART = "restart"  # from the last checkpoint, as a restart for cause `stalled`
    STOP = "stop"  # the job fails with cause `stalled`
    NOTIFY = "notify"  # the job's event and the notifications only


@dataclass(frozen=True, slots=True)
class StallSpec:
    k: float = 2.0
    floor_seconds: float = 20.0
    grace_seconds: float = 60.0
    on_stall: str = OnStall.RESTART.value  # an `OnStall` value (plain text: JSON, YAML)
    max_phase_seconds: float = 3600.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> StallSpec:
        data = data or {}
        return cls(
            k=float(data.get("k", 2.0)),
            floor_seconds=float(data.get("floor_seconds", 20.0)),
            grace_seconds=float(data.get("grace_seconds", 60.0)),
            on_stall=OnStall(data.get("on_stall", OnStall.RESTART)).value,
            max_phase_seconds=float(data.get("max_phase_seconds", 3600.0)),
        )


@dataclass(frozen=True, slots=True)
class ProgressView:
    """What telemetry recorded of a job's progress (`telemetry.progress`): its last
    progress (`at`, None: none yet), the recent intervals between progresses (seconds,
    phase time left out), the phase seconds since `at` of phases that ended, and since
    when a phase is open (None: none is)."""

    at: datetime | None = None
    intervals: Sequence[float] = field(default_factory=tuple)
    paused: float = 0.0
    phase_since: datetime | None = None

    def phase_seconds(self, now: datetime) -> float:
        """Phase time since the last progress, the open phase's included."""
        open_for = (now - self.phase_since).total_seconds() if self.phase_since else 0.0
        return self.paused + max(open_for, 0.0)


@dataclass(frozen=True, slots=True)
class Verdict:
    stalled: bool
    idle_s: float  # since the last progress, phase time left out
    limit_s: float
    p95_s: float

    def describe(self, spec: StallSpec) -> str:
        """ "no progress for 95 s (its limit: 2 x p95 interval 4.1 s, at least 20 s)"."""
        return (
            f"no progress for {self.idle_s:.0f} s (its limit: {spec.k:g} x p95 interval "
            f"{self.p95_s:.1f} s, at least {spec.floor_seconds:g} s)"
        )


def p95(intervals: Sequence[float]) -> float:
    """The 95th percentile, nearest rank (of fewer than 20 values: the largest)."""
    ordered = sorted(intervals)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def judge(
    spec: StallSpec, view: ProgressView, now: datetime, run_since: datetime | None = None
) -> Verdict | None:
    """The job's verdict at `now`; None when it cannot be judged yet: fewer than
    `MIN_INTERVALS` intervals, or no progress since it last started running
    (`run_since`)."""
    if view.at is None or len(view.intervals) < MIN_INTERVALS:
        return None
    if run_since is not None and run_since > view.at:
        return None
    typical = p95(view.intervals)
    limit = max(spec.floor_seconds, spec.k * typical)
    phases = min(view.phase_seconds(now), spec.max_phase_seconds)
    idle = (now - view.at).total_seconds() - phases
    return Verdict(stalled=idle > limit, idle_s=idle, limit_s=limit, p95_s=typical)
