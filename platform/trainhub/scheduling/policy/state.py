"""The mutable working state of one cycle, built from a snapshot."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .model import (
    PENDING,
    STOPPING,
    Decisions,
    Job,
    ModelResources,
    Reservation,
    Resources,
    Snapshot,
    StartJob,
    Task,
    TaskPlacement,
    gpu_model_of,
)
from .placement import Capacity, Placed
from .quota import QuotaBook
from .tally import take_held


@dataclass
class RunningJob:
    job: Job
    tasks: list[Task]  # active tasks (not stopping)
    next_worker_index: int
    workers: int
    touched: bool = False  # rescaled or preempted in this cycle
    frozen: bool = False
    gone: bool = False  # preempted in this cycle

    @property
    def held(self) -> Resources:
        total = Resources()
        for t in self.tasks:
            total = total + t.resources
        return total


@dataclass
class CycleState:
    snapshot: Snapshot
    cap: Capacity
    book: QuotaBook
    running: dict[int, RunningJob]
    pending: list[Job]
    reservations: dict[int, list[Reservation]]
    decisions: Decisions = field(default_factory=Decisions)
    capacity_blocked: bool = False
    make_room_attempts: int = 0
    no_room: set[tuple[object, ...]] = field(default_factory=set)
    victims: object = None  # reclaim's victim lists, built on first need
    until: int | None = None  # only this job's decision is wanted (`schedule(until=)`)

    @classmethod
    def build(cls, snapshot: Snapshot, *, quotas: bool = True) -> CycleState:
        cfg = snapshot.config
        cap = Capacity(snapshot.nodes, cfg.cpu_reserved_per_free_gpu)
        ready_total = Resources()
        for n in snapshot.nodes:
            if n.state != "lost":
                ready_total = ready_total + n.capacity
        book = QuotaBook(snapshot.teams if quotas else (), ready_total)
        pending: list[Job] = []
        held: list[Job] = []
        teams_seen: set[str] = set()
        for job in snapshot.jobs:
            if job.team not in teams_seen:
                teams_seen.add(job.team)
                book.ensure(job.team)
            (pending if job.state == PENDING else held).append(job)
        tally = take_held(cap, snapshot.nodes, held)
        now = snapshot.now
        running: dict[int, RunningJob] = {}
        for job, active, next_worker_index, workers in tally.running:
            frozen = (
                job.last_rescale_time is not None
                and now < job.last_rescale_time + job.freeze_seconds
            )
            running[job.id] = RunningJob(
                job=job,
                tasks=list(active),
                next_worker_index=next_worker_index,
                workers=workers,
                frozen=frozen,
            )
        for team, acc in sorted(tally.team_used.items()):
            book.add(team, Resources(*acc))
        pending_ids = {j.id: j for j in pending}
        reservations: dict[int, list[Reservation]] = defaultdict(list)
        for r in snapshot.reservations:
            owner = pending_ids.get(r.job_id)
            if owner is None or now > r.created_at + cfg.reservation_timeout_seconds:
                continue  # started, gone or stale: released
            if r.node_id not in cap.position:
                continue
            reservations[r.job_id].append(r)
            cap.hold(r.node_id, r.resources, owner.team)
            book.add(owner.team, r.resources)
        cap.build_index()
        return cls(snapshot, cap, book, running, pending, dict(reservations))

    def start(self, job: Job, placed: list[Placed], borrowed: bool) -> None:
        ids = self.cap.node_ids
        self.decisions.starts.append(
            StartJob(
                job.id,
                tuple(
                    TaskPlacement(role, index, ids[pos], res, borrowed)
                    for role, index, pos, res in sorted(placed, key=lambda p: (p[0], p[1]))
                ),
            )
        )
        self.book.add(job.team, _total(placed))

    def reserve(self, job: Job, placed: list[Placed]) -> None:
        per_node: dict[int, Resources] = {}
        for _, _, pos, res in placed:
            node_id = self.cap.node_ids[pos]
            per_node[node_id] = per_node.get(node_id, Resources()) + res
        # Only workers have a GPU model, so a node's reserved GPUs are all of it.
        model = gpu_model_of(job.worker)
        self.reservations[job.id] = [
            Reservation(
                job.id,
                node_id,
                ModelResources(res.cpu, res.memory_mb, res.gpu, model)
                if model is not None and res.gpu > 0
                else res,
                self.snapshot.now,
            )
            for node_id, res in sorted(per_node.items())
        ]
        self.book.add(job.team, _total(placed))

    def finish(self) -> Decisions:
        d = self.decisions
        started = {s.job_id for s in d.starts}
        for job in self.pending:
            if job.id not in started and job.id not in d.pending_reasons:
                d.pending_reasons[job.id] = "waiting for the next scheduling cycle"
        d.reservations = [
            r
            for job_id in sorted(self.reservations)
            if job_id not in started
            for r in self.reservations[job_id]
        ]
        return d

    def reason(self, job: Job, text: str) -> None:
        self.decisions.pending_reasons[job.id] = text


def may_borrow_for(st: CycleState, job: Job) -> bool:
    """Production jobs never borrow; a job preempted `borrow_preemption_limit` times
    borrows no more, unless its team's nominal quota could never hold it."""
    if job.is_production:
        return False
    if job.preemptions < st.snapshot.config.borrow_preemption_limit:
        return True
    nominal = st.book.nominal.get(job.team)
    return nominal is None or not job.demand().fits_in(Resources(*nominal))


def _total(placed: list[Placed]) -> Resources:
    cpu = mem = gpu = 0.0
    for _, _, _, res in placed:
        cpu += res.cpu
        mem += res.memory_mb
        gpu += res.gpu
    return Resources(cpu, mem, gpu)


def demand_of(tasks: list[Task] | tuple[Task, ...]) -> Resources:
    total = Resources()
    for t in tasks:
        total = total + t.resources
    return total


__all__ = ["STOPPING", "CycleState", "RunningJob", "demand_of", "may_borrow_for"]
