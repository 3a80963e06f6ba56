"""Elastic growth: give idle capacity to running jobs, one worker at a time.

Runs after every pending job had its turn, and only when no pending job is blocked for
capacity (growing would take what it waits for). The job whose team is furthest below its
fair share, then the job holding the least per priority weight, gets the next worker;
production jobs grow only within their team's nominal quota. Jobs inside their freeze
window, or touched in this cycle, keep their size.
"""

from __future__ import annotations

import heapq

from .model import WORKER, AddWorker, Resources, Task, TaskPlacement
from .state import CycleState, RunningJob, may_borrow_for


def _held_share(st: CycleState, rj: RunningJob) -> float:
    cap = st.book.capacity
    held = rj.held.as_tuple()
    share = max((held[r] / cap[r] for r in range(3) if cap[r] > 0), default=0.0)
    return share / rj.job.weight


def grow(st: CycleState) -> None:
    if st.capacity_blocked:
        return
    heap = [
        (st.book.fair_key(rj.job.team), _held_share(st, rj), rj.job.id)
        for rj in st.running.values()
        if rj.job.is_elastic
        and not rj.frozen
        and not rj.touched
        and not rj.gone
        and rj.workers < rj.job.workers_max
    ]
    heapq.heapify(heap)
    failed: set[tuple[str, Resources]] = set()
    grown: set[int] = set()
    while heap:
        _, _, job_id = heapq.heappop(heap)
        rj = st.running[job_id]
        job = rj.job
        if (job.team, job.worker) in failed:
            continue
        admission = st.book.admit(job.team, job.worker, may_borrow=may_borrow_for(st, job))
        if not admission.ok or admission.reclaim:
            continue
        pos = st.cap.find(job.team, job.worker)
        if pos is None:
            failed.add((job.team, job.worker))
            continue
        st.cap.take(pos, job.worker, job.team)
        st.book.add(job.team, job.worker)
        node_id = st.cap.node_ids[pos]
        index = rj.next_worker_index
        rj.next_worker_index += 1
        rj.workers += 1
        rj.tasks.append(Task(WORKER, index, node_id, job.worker, admission.borrows))
        st.decisions.add_workers.append(
            AddWorker(job.id, TaskPlacement(WORKER, index, node_id, job.worker, admission.borrows))
        )
        grown.add(job.id)
        if rj.workers < job.workers_max:
            heapq.heappush(heap, (st.book.fair_key(job.team), _held_share(st, rj), job.id))
    for job_id in grown:
        st.running[job_id].touched = True
