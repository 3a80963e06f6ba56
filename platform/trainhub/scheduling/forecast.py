"""When would a waiting job start? A forward run of the live policy over the current queue.

Pure Python on the policy's own types (no Django): `preview.py` feeds it the snapshot and
how long jobs are expected to run. Running jobs end at their expected time, one after
another; after each end the policy runs on what is left, and the jobs it starts hold
their capacity until their own expected end. The first of those runs that starts the
job asked about gives its estimated start.

It is an estimate, and says so: a job whose runtime is unknown never ends in it, growth,
shrinking and preemptions of later cycles are left out (the capacity a preemption would
free is not counted, so the estimate errs late), and it gives up (None) after
`max_events` ends or `budget_s` seconds of work, and never starts a policy run it expects
to end past that budget (on a cluster of 10,000 jobs one run takes longer than it).
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable, Mapping

from . import policy


def estimate_start(
    snapshot: policy.Snapshot,
    job_id: int,
    *,
    ends: Mapping[int, float],
    runtime: Callable[[policy.Job], float | None],
    policy_name: str,
    max_events: int = 64,
    budget_s: float = 0.15,
    run_s: float = 0.0,
) -> float | None:
    """The time (seconds since the epoch) the policy would first start `job_id`, or None.

    `ends`: the expected end of running jobs (those missing never end here); `runtime`:
    how long a job started in the forecast is expected to run (None: unknown); `run_s`:
    how long one policy run is expected to take: no run starts that would end past the
    budget (each run's own time is the next one's expectation).
    """
    deadline = time.perf_counter() + budget_s
    jobs = {j.id: j for j in snapshot.jobs}
    queue = [(at, jid) for jid, at in ends.items() if jid in jobs]
    heapq.heapify(queue)
    snap = snapshot
    for _ in range(max_events):
        began = time.perf_counter()
        if not queue or began + run_s > deadline:
            return None
        at, done = heapq.heappop(queue)
        jobs.pop(done, None)
        snap = dataclasses.replace(snap, now=max(at, snap.now), jobs=tuple(jobs.values()))
        decisions = policy.schedule(snap, policy_name)
        run_s = time.perf_counter() - began
        snap = dataclasses.replace(snap, reservations=tuple(decisions.reservations))
        for start in decisions.starts:
            if start.job_id == job_id:
                return snap.now
            started = _started(jobs[start.job_id], start, snap.now)
            jobs[start.job_id] = started
            expected = runtime(started)
            if expected is not None:
                heapq.heappush(queue, (snap.now + expected, start.job_id))
    return None


def _started(job: policy.Job, start: policy.StartJob, now: float) -> policy.Job:
    tasks = tuple(
        policy.Task(p.role, p.index, p.node_id, p.resources, borrowed=p.borrowed)
        for p in start.tasks
    )
    return dataclasses.replace(job, state=policy.RUNNING, tasks=tasks, started_at=now)
