"""Baseline policies for comparison in the simulator: no quotas, no elasticity, no preemption.

- fifo: strict submission order; the first job that does not fit blocks every job behind
  it (head-of-line blocking, as a FIFO queue without backfill).
- priority: highest priority first, then submission order; a job that does not fit is
  skipped and later ones may start (backfill).
Both place gangs with the same best-fit placement as the fair-share policy.
"""

from __future__ import annotations

from .model import Decisions, Snapshot
from .state import CycleState


def schedule_fifo(snapshot: Snapshot) -> Decisions:
    st = CycleState.build(snapshot, quotas=False)
    blocker: int | None = None
    for job in sorted(st.pending, key=lambda j: (j.submit_time, j.id)):
        if blocker is not None:
            st.reason(job, f"waiting behind job {blocker} (first in, first out)")
            continue
        placed = st.cap.place_gang(job.team, job.gang())
        if placed is None:
            st.reason(job, st.cap.why_not(job.gang(), job.team))
            blocker = job.id
        else:
            st.start(job, placed, borrowed=False)
    return st.finish()


def schedule_priority(snapshot: Snapshot) -> Decisions:
    st = CycleState.build(snapshot, quotas=False)
    for job in sorted(st.pending, key=lambda j: (-j.weight, j.submit_time, j.id)):
        placed = st.cap.place_gang(job.team, job.gang())
        if placed is None:
            st.reason(job, st.cap.why_not(job.gang(), job.team))
        else:
            st.start(job, placed, borrowed=False)
    return st.finish()
