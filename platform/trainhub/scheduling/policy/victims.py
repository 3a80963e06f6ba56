"""The running jobs that may give way to a blocked pending job (`reclaim.make_room`):
which teams may give way, whether a job may, and the victim lists built once per cycle
(with what they hold per node, `reach.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from .model import Job
from .reach import Reach, build_reach
from .state import CycleState, RunningJob


def eligible(
    st: CycleState, victim: RunningJob, job: Job, reclaim: bool, key: tuple[int, float]
) -> bool:
    v = victim.job
    if v.team == job.team or v.is_production or victim.gone:
        return False
    if reclaim:
        return st.book.is_borrowing(v.team)
    return st.book.fair_key(v.team) > key


def fair_key_after(st: CycleState, job: Job) -> tuple[int, float]:
    st.book.add(job.team, job.demand())
    try:
        return st.book.fair_key(job.team)
    finally:
        st.book.remove(job.team, job.demand())


@dataclass
class Victims:
    """Running jobs that could give way, in victim order; built once per cycle."""

    cpu_on_gpu: list[RunningJob]
    elastic: list[RunningJob]
    borrowers: list[RunningJob]
    movable: list[RunningJob]  # borrowers with replicated PS shards, by job id
    reach: Reach | None = None  # what they hold per node (`reach.py`), built on first need

    def bound(self, st: CycleState) -> Reach:
        if self.reach is None:
            self.reach = build_reach(
                st,
                borrowers=self.borrowers,
                cpu_on_gpu=self.cpu_on_gpu,
                elastic=self.elastic,  # `movable` are borrowers: their servers counted there
            )
        return self.reach


def victims_of(st: CycleState) -> Victims:
    if isinstance(st.victims, Victims):
        return st.victims
    gpu_nodes = {st.cap.node_ids[p] for p in range(len(st.cap.node_ids)) if st.cap.has_gpus[p]}
    running = sorted(st.running.values(), key=lambda rj: rj.job.id)

    now = st.snapshot.now
    cap = st.book.capacity
    min_run = st.snapshot.config.min_borrowed_run_seconds

    def preempt_order(rj: RunningJob) -> tuple[bool, bool, float, float, float, float, int]:
        j = rj.job
        ran = now - (j.started_at if j.started_at is not None else now)
        held = rj.held.as_tuple()
        size = max((held[r] / cap[r] for r in range(3) if cap[r] > 0), default=0.0)
        young = ran < min_run and any(t.borrowed for t in rj.tasks)
        return (young, not j.reclaim_first, j.weight, j.work_at_risk(now), ran, size, j.id)

    victims = Victims(
        cpu_on_gpu=sorted(
            (
                rj
                for rj in running
                if rj.job.worker.gpu == 0 and any(t.node_id in gpu_nodes for t in rj.tasks)
            ),
            key=preempt_order,
        ),
        elastic=[rj for rj in running if rj.job.is_elastic and not rj.frozen],
        borrowers=sorted(
            (rj for rj in running if any(t.borrowed for t in rj.tasks)), key=preempt_order
        ),
        movable=[
            rj for rj in running if rj.job.ps_replication > 0 and any(t.borrowed for t in rj.tasks)
        ],
    )
    st.victims = victims
    return victims


def teams_giving_way(
    st: CycleState, job: Job, reclaim: bool, key: tuple[int, float] | None = None
) -> set[str]:
    """The teams whose jobs may give way to `job` now (a team's jobs only get fewer
    during an attempt, and so do these teams)."""
    if key is None:
        key = (0, 0.0) if reclaim else fair_key_after(st, job)
    return {
        t
        for t in st.book.teams
        if t != job.team and (st.book.is_borrowing(t) if reclaim else st.book.fair_key(t) > key)
    }
