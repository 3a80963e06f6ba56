"""Replays a trace through the scheduling policy on a virtual clock.

A cycle runs at every submission and completion, one second after a cycle that preempted
or shrank something (the victims' grace period is taken to fit in that second), when a
freeze window ends, and every `interval_s` while jobs wait (if set). Progress: `duration_s`
is the runtime at `workers_min`; with n workers a job progresses (n / workers_min) ** 0.8
times as fast. A job checkpoints every `checkpoint_every_s` of running (the trace's, 300 s
by default); a preempted job loses what it did since its last checkpoint (counted in
`lost_work_s`, and in its completion time) and pays 30 s of restart when it runs again.
Jobs get internal integer ids in trace order; the trace's own ids (strings or integers)
key `started` and `ended`.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field

from trainhub.scheduling.policy import (
    PENDING,
    PS,
    RUNNING,
    WORKER,
    Decisions,
    Job,
    PolicyConfig,
    Reservation,
    Resources,
    Snapshot,
    Task,
    schedule,
)
from trainhub.scheduling.policy.order import vruntime_increment

from .inputs import Cluster, TraceJob
from .report import Recorder, Report

RESTART_COST_S = 30.0
SPEEDUP_EXPONENT = 0.8
FOLLOW_UP_S = 1.0


@dataclass
class SimJob:
    sid: int  # the policy's job id
    trace: TraceJob
    worker: Resources
    ps: Resources
    coordinator: Resources
    min_demand: tuple[float, float, float]  # the gang: coordinator, PS shards, min workers
    state: str = PENDING
    tasks: list[Task] = field(default_factory=list)
    work_left: float = 0.0  # seconds of work at workers_min
    checkpoint_left: float = 0.0  # work_left at the last checkpoint
    run_since: float = 0.0
    stall_until: float = 0.0
    restarts: int = 0
    preemptions: int = 0
    vruntime: float = 0.0
    last_rescale: float | None = None
    started_at: float | None = None
    pending_since: float = 0.0
    version: int = 0
    end: float | None = None

    # Derived from `tasks`; refreshed by set_tasks().
    workers: int = 0
    rate: float = 1.0
    held: Resources = field(default_factory=Resources)

    vruntime_rate: float = 0.0  # vruntime accrued per second at the current size
    job_cache: Job | None = None  # the snapshot's view while running; None when stale

    def set_tasks(self, tasks: list[Task], capacity: Resources) -> None:
        self.tasks = tasks
        self.job_cache = None
        self.workers = sum(1 for t in tasks if t.role == WORKER)
        self.rate = max(1, self.workers) / self.trace.workers_min
        self.rate **= SPEEDUP_EXPONENT
        total = Resources()
        for t in tasks:
            total = total + t.resources
        self.held = total
        self.vruntime_rate = vruntime_increment(total, capacity, 1.0, self.trace.priority)


def _sim_job(sid: int, t: TraceJob) -> SimJob:
    worker = Resources(t.cpu_per_worker, t.memory_mb_per_worker, t.gpu_per_worker)
    ps = Resources(
        t.cpu_per_worker if t.ps_cpu is None else t.ps_cpu,
        t.memory_mb_per_worker if t.ps_memory_mb is None else t.ps_memory_mb,
        0,
    )
    coordinator = Resources(t.coordinator_cpu, t.coordinator_memory_mb, 0)
    gang = coordinator + ps.times(t.ps) + worker.times(t.workers_min)
    return SimJob(
        sid,
        t,
        worker,
        ps,
        coordinator,
        gang.as_tuple(),
        work_left=t.duration_s,
        checkpoint_left=t.duration_s,
        pending_since=t.submit_time_s,
    )


@dataclass
class Simulator:
    cluster: Cluster
    trace: list[TraceJob]
    policy: str = "cfs"
    config: PolicyConfig = field(default_factory=PolicyConfig)
    freeze_seconds: float = 120.0
    interval_s: float = 0.0
    check: bool = False  # verify no node is over-committed after every cycle (tests)
    # Filled by run(): first start and end time of every job, by the trace's job id.
    started: dict[int | str, float] = field(default_factory=dict, init=False)
    ended: dict[int | str, float] = field(default_factory=dict, init=False)

    def run(self) -> Report:
        cap = self.cluster.capacity
        jobs = {sid: _sim_job(sid, t) for sid, t in enumerate(self.trace, start=1)}
        rec = Recorder(self.cluster)
        events: list[tuple[float, int, str, int, int]] = []
        seq = 0

        def push(time: float, kind: str, job_id: int = 0, version: int = 0) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(events, (time, seq, kind, job_id, version))

        for sj in jobs.values():
            push(sj.trace.submit_time_s, "submit", sj.sid)
        active: dict[int, SimJob] = {}
        reservations: tuple[Reservation, ...] = ()
        ticks: set[float] = set()
        now = self.trace[0].submit_time_s if self.trace else 0.0
        while events:
            time = events[0][0]
            self._advance(active, now, time, cap, rec)
            now = time
            while events and events[0][0] == now:
                _, _, kind, job_id, version = heapq.heappop(events)
                if kind == "submit":
                    active[job_id] = jobs[job_id]
                    rec.submitted(jobs[job_id])
                elif kind == "finish":
                    sj = jobs[job_id]
                    if sj.version == version and sj.state == RUNNING:
                        sj.state, sj.end, sj.work_left = "done", now, 0.0
                        sj.set_tasks([], self.cluster.capacity)
                        del active[job_id]
                        rec.finished(sj)
                        self.ended[sj.trace.job_id] = now
                else:
                    ticks.discard(now)
            snapshot = self._snapshot(now, active, reservations)
            decisions = schedule(snapshot, self.policy)
            reservations = tuple(decisions.reservations)
            changed = self._apply(now, decisions, jobs, rec)
            for sj in changed:
                if sj.state == RUNNING:
                    finish = max(now, sj.stall_until) + sj.work_left / sj.rate
                    push(finish, "finish", sj.sid, sj.version)
            if self.check:
                self._check(active)
            wake = self._next_wake(now, decisions, active, reservations)
            if wake is not None and wake not in ticks:
                ticks.add(wake)
                push(wake, "tick")
        return rec.report(self.policy)

    # -- time passing -----------------------------------------------------------------------

    def _advance(
        self, active: dict[int, SimJob], t0: float, t1: float, cap: Resources, rec: Recorder
    ) -> None:
        dt = t1 - t0
        if dt <= 0:
            return
        per_team: dict[str, list[float]] = {}
        wanted: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for sj in active.values():
            want = wanted[sj.trace.team]
            if sj.state != RUNNING:
                if sj.state == PENDING:
                    for r in range(3):
                        want[r] += sj.min_demand[r]
                continue
            want[0] += sj.held.cpu
            want[1] += sj.held.memory_mb
            want[2] += sj.held.gpu
            rate = sj.rate
            start = max(t0, sj.stall_until)
            left_at_t0 = sj.work_left
            if t1 > start:
                sj.work_left = max(0.0, left_at_t0 - rate * (t1 - start))
            # The last checkpoint boundary crossed in (t0, t1], if any.
            every = sj.trace.checkpoint_every_s
            k = math.floor((t1 - sj.run_since) / every)
            boundary = sj.run_since + k * every
            if k >= 1 and boundary > t0:
                sj.checkpoint_left = max(0.0, left_at_t0 - rate * max(0.0, boundary - start))
            sj.vruntime += sj.vruntime_rate * dt
            held = sj.held
            acc = per_team.get(sj.trace.team)
            if acc is None:
                per_team[sj.trace.team] = [held.cpu, held.memory_mb, held.gpu]
            else:
                acc[0] += held.cpu
                acc[1] += held.memory_mb
                acc[2] += held.gpu
        rec.advance(per_team, wanted, t0, t1)

    def _next_wake(
        self,
        now: float,
        decisions: Decisions,
        active: dict[int, SimJob],
        reservations: tuple[Reservation, ...],
    ) -> float | None:
        if decisions.preemptions or decisions.remove_workers or reservations:
            return now + FOLLOW_UP_S
        waiting = any(sj.state == PENDING for sj in active.values())
        wake = math.inf
        if self.interval_s > 0 and waiting:
            wake = now + self.interval_s
        for sj in active.values():
            t = sj.trace
            if sj.state != RUNNING or t.workers_max == t.workers_min or sj.last_rescale is None:
                continue
            thaw = sj.last_rescale + self.freeze_seconds
            if thaw > now and (sj.workers < t.workers_max or waiting):
                wake = min(wake, thaw)
        return None if wake == math.inf else wake

    # -- policy in and out ------------------------------------------------------------------

    def _snapshot(
        self, now: float, active: dict[int, SimJob], reservations: tuple[Reservation, ...]
    ) -> Snapshot:
        jobs = []
        for job_id in sorted(active):
            sj = active[job_id]
            if sj.state == RUNNING and sj.job_cache is not None:
                jobs.append(sj.job_cache)  # running jobs' vruntime does not order anything
                continue
            t = sj.trace
            job = Job(
                id=sj.sid,
                team=t.team,
                priority=t.priority,
                state=sj.state,
                submit_time=t.submit_time_s,
                worker=sj.worker,
                workers_min=t.workers_min,
                workers_max=t.workers_max,
                ps_count=t.ps,
                ps=sj.ps,
                coordinator=sj.coordinator,
                freeze_seconds=self.freeze_seconds,
                tasks=tuple(sj.tasks),
                vruntime=sj.vruntime,
                last_rescale_time=sj.last_rescale,
                started_at=sj.started_at,
                pending_since=sj.pending_since,
                checkpoint_every_seconds=t.checkpoint_every_s,
                preemptions=sj.preemptions,
            )
            if sj.state == RUNNING:
                sj.job_cache = job
            jobs.append(job)
        return Snapshot(
            now, self.cluster.nodes, self.cluster.teams, tuple(jobs), reservations, self.config
        )

    def _apply(
        self, now: float, d: Decisions, jobs: dict[int, SimJob], rec: Recorder
    ) -> list[SimJob]:
        changed: dict[int, SimJob] = {}
        resized: set[int] = set()  # jobs resized in this cycle: one resize each
        for p in d.preemptions:
            sj = jobs[p.job_id]
            sj.state = PENDING
            # Progress since the last checkpoint is lost, in seconds of running at this size.
            lost = max(0.0, sj.checkpoint_left - sj.work_left) / sj.rate
            sj.set_tasks([], self.cluster.capacity)
            sj.work_left = sj.checkpoint_left
            sj.pending_since = now
            sj.preemptions += 1
            sj.version += 1
            rec.preempted(sj, lost)
        for m in d.move_servers:  # the job runs on; its server runs on another node
            sj = jobs[m.job_id]
            sj.set_tasks(
                [
                    dataclasses.replace(t, node_id=m.to_node_id)
                    if t.role == PS and t.index == m.index
                    else t
                    for t in sj.tasks
                ],
                self.cluster.capacity,
            )
        for r in d.remove_workers:
            sj = jobs[r.job_id]
            sj.set_tasks(
                [t for t in sj.tasks if not (t.role == WORKER and t.index == r.index)],
                self.cluster.capacity,
            )
            sj.last_rescale = now
            sj.job_cache = None
            changed[sj.sid] = sj
            resized.add(sj.sid)
        for s in d.starts:
            sj = jobs[s.job_id]
            sj.state = RUNNING
            sj.set_tasks(
                [Task(p.role, p.index, p.node_id, p.resources, p.borrowed) for p in s.tasks],
                self.cluster.capacity,
            )
            sj.run_since = now
            sj.checkpoint_left = sj.work_left
            sj.stall_until = now + (RESTART_COST_S if sj.restarts else 0.0)
            sj.restarts += 1
            if sj.started_at is None:
                rec.first_start(sj, now)
                self.started[sj.trace.job_id] = now
            sj.started_at = now
            sj.last_rescale = now
            sj.job_cache = None
            changed[sj.sid] = sj
        for a in d.add_workers:
            sj = jobs[a.job_id]
            placed = a.task
            sj.set_tasks(
                [
                    *sj.tasks,
                    Task(
                        placed.role, placed.index, placed.node_id, placed.resources, placed.borrowed
                    ),
                ],
                self.cluster.capacity,
            )
            sj.last_rescale = now
            sj.job_cache = None
            changed[sj.sid] = sj
            resized.add(sj.sid)
        for _ in resized:
            rec.resized()
        for sj in changed.values():
            sj.version += 1
        return [changed[k] for k in sorted(changed)]

    def _check(self, active: dict[int, SimJob]) -> None:
        used: dict[int, Resources] = defaultdict(Resources)
        for sj in active.values():
            for t in sj.tasks:
                used[t.node_id] = used[t.node_id] + t.resources
            ps_nodes = [t.node_id for t in sj.tasks if t.role == PS]
            assert len(ps_nodes) == sj.trace.ps or sj.state != RUNNING
        for node in self.cluster.nodes:
            assert used[node.id].fits_in(node.capacity), f"node {node.id} over-committed"
