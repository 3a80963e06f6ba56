"""The fair-share policy: one cycle from a snapshot to decisions."""

from __future__ import annotations

import heapq
from collections import defaultdict

from .elastic import grow
from .model import Decisions, Job, Snapshot
from .order import team_queue_key
from .reclaim import make_room
from .state import CycleState, may_borrow_for


def schedule_cfs(snapshot: Snapshot, *, until: int | None = None) -> Decisions:
    """Start, resize and preempt jobs per DESIGN.md §3; deterministic for a snapshot.

    `until`: stop once job `until` has been tried (its decision is final then: nothing
    later in a cycle starts a pending job), and word no other job's pending reason."""
    st = CycleState.build(snapshot)
    st.until = until
    _start_reserved(st)
    if until is not None and (
        until in st.reservations or any(s.job_id == until for s in st.decisions.starts)
    ):
        return st.finish()  # it started on, or still waits for, its reservation
    if not _start_in_fair_order(st):
        grow(st)
    return st.finish()


def _start_reserved(st: CycleState) -> None:
    """Jobs that capacity was reclaimed for start first, on what was freed for them."""
    for job in sorted(
        (j for j in st.pending if j.id in st.reservations),
        key=lambda j: (min(r.created_at for r in st.reservations[j.id]), j.id),
    ):
        held = st.reservations.pop(job.id)
        for r in held:
            st.cap.give_back(st.cap.position[r.node_id], r.resources, job.team)
            st.book.remove(job.team, r.resources)
        placed = st.cap.place_gang(job.team, job.gang(), job.avoid_nodes)
        if placed is not None:
            borrows = st.book.admit(job.team, job.demand(), may_borrow_for(st, job)).borrows
            st.start(job, placed, borrows)
            continue
        for r in held:
            st.cap.take(st.cap.position[r.node_id], r.resources, job.team)
            st.book.add(job.team, r.resources)
        st.reservations[job.id] = held
        st.reason(job, "capacity reclaimed for it: waiting for other jobs' tasks to stop")


def _start_in_fair_order(st: CycleState) -> bool:
    """Try pending jobs in fair order; True when it stopped at `st.until`."""
    cfg = st.snapshot.config
    now = st.snapshot.now
    queues: dict[str, list[Job]] = defaultdict(list)
    started = {s.job_id for s in st.decisions.starts}  # on their reservations
    for job in st.pending:
        if (
            job.id not in st.reservations
            and job.id not in st.decisions.pending_reasons
            and job.id not in started
        ):
            queues[job.team].append(job)
    for q in queues.values():
        q.sort(key=lambda j: team_queue_key(j, now, cfg.aging_seconds_per_level), reverse=True)
    heap = [(st.book.fair_key(team), team) for team in queues]
    heapq.heapify(heap)
    while heap:
        _, team = heapq.heappop(heap)
        q = queues[team]
        job = q.pop()
        _try_start(st, job)
        if job.id == st.until:
            return True
        if q:
            heapq.heappush(heap, (st.book.fair_key(team), team))
    return False


def _try_start(st: CycleState, job: Job) -> None:
    admission = st.book.admit(
        job.team,
        job.demand(),
        may_borrow=may_borrow_for(st, job),
        no_borrow_why="production jobs never borrow"
        if job.is_production
        else f"preempted {job.preemptions} times: it borrows no more",
    )
    if not admission.ok:
        # Borrowers further above their fair share may give way to this borrower.
        if not (admission.pool_short and make_room(st, job, admission)):
            st.reason(job, admission.reason)
        return
    gang = job.gang()
    if not admission.reclaim:
        placed = st.cap.place_gang(job.team, gang, job.avoid_nodes)
        if placed is not None:
            st.start(job, placed, admission.borrows)
            return
    if make_room(st, job, admission):
        return
    st.capacity_blocked = True
    if admission.reclaim:
        st.reason(job, "its team's idle quota is lent out and cannot be reclaimed yet")
    elif st.until is None or job.id == st.until:
        st.reason(job, st.cap.why_not(gang, job.team))
