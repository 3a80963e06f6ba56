"""What reclaim and fair share take from a running job to make room, one unit at a time.

A unit is one of: a whole job to preempt, one worker of an elastic job to remove, or
one parameter server of a job with replicated shards to move to another node (the job
runs on: the server's replacement copies its shards from a live replica). Units are
taken tentatively (`take_unit`, `give_back_unit`) while the policy searches for room,
and recorded as decisions (`record_unit`) once the room is found.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .model import PS, WORKER, Job, MoveServer, PreemptJob, RemoveWorker, Resources, Task
from .state import CycleState, RunningJob


@dataclass
class Unit:
    job: RunningJob
    preempt: bool  # else: remove one worker, or move a server
    tasks: list[tuple[int, Resources]]  # (node position, resources) freed
    worker: Task | None = None
    server: Task | None = None  # the server to move, to node position `to`
    to: int = -1

    @property
    def frees(self) -> Resources:
        """Capacity the unit gives the cluster (a move gives none: it only shifts it)."""
        total = Resources()
        if self.server is None:
            for _, res in self.tasks:
                total = total + res
        return total


def worker_unit(st: CycleState, rj: RunningJob) -> Unit:
    worker = max((t for t in rj.tasks if t.role == WORKER), key=lambda t: t.index)
    return Unit(
        rj,
        preempt=False,
        tasks=[(st.cap.position[worker.node_id], worker.resources)],
        worker=worker,
    )


def preempt_unit(st: CycleState, rj: RunningJob) -> Unit:
    return Unit(
        rj,
        preempt=True,
        tasks=[
            (st.cap.position[t.node_id], t.resources)
            for t in rj.tasks
            if t.node_id in st.cap.position
        ],
    )


def move_units(st: CycleState, rj: RunningJob) -> list[Unit]:
    """One server of a job with replicated shards, moved to the tightest other node with
    room for it: one move per job at a time, so every shard keeps a live replica."""
    if rj.job.ps_replication <= 0 or rj.gone:
        return []
    units = []
    for server in sorted((t for t in rj.tasks if t.role == PS), key=lambda t: t.index):
        pos = st.cap.position.get(server.node_id)
        if pos is None:
            continue
        to = st.cap.find(rj.job.team, server.resources, exclude={pos})
        if to is not None:
            units.append(Unit(rj, False, [(pos, server.resources)], server=server, to=to))
    return units


def take_unit(st: CycleState, unit: Unit) -> None:
    """Tentatively free what the unit holds."""
    _turn(st, unit, +1)


def give_back_unit(st: CycleState, unit: Unit) -> None:
    """Undo `take_unit`."""
    _turn(st, unit, -1)


def _turn(st: CycleState, unit: Unit, sign: int) -> None:
    team = unit.job.job.team
    if unit.server is not None:
        ((pos, res),) = unit.tasks
        server = unit.server
        moved = dataclasses.replace(server, node_id=st.cap.node_ids[unit.to])
        if sign > 0:
            st.cap.give_back(pos, res, team)
            st.cap.take(unit.to, res, team)
        else:
            st.cap.take(pos, res, team)
            st.cap.give_back(unit.to, res, team)
        old, new = (server, moved) if sign > 0 else (moved, server)
        unit.job.tasks[unit.job.tasks.index(old)] = new
        return
    total = Resources()
    for pos, res in unit.tasks:
        if sign > 0:
            st.cap.give_back(pos, res, team)
        else:
            st.cap.take(pos, res, team)
        total = total + res
    if sign > 0:
        st.book.remove(team, total)
    else:
        st.book.add(team, total)
    if unit.preempt:
        unit.job.gone = sign > 0
    elif unit.worker is not None:
        unit.job.workers -= sign
        if sign > 0:
            unit.job.tasks.remove(unit.worker)
        else:
            unit.job.tasks.append(unit.worker)


def record_unit(st: CycleState, unit: Unit, job: Job) -> None:
    """The decision for a unit taken for `job`."""
    rj = unit.job
    rj.touched = True
    why = f"making room for job {job.id} of team {job.team}"
    if unit.preempt:
        st.decisions.preemptions.append(
            PreemptJob(rj.job.id, st.snapshot.config.preemption_grace_seconds, why)
        )
        rj.tasks = []
        return
    if unit.server is not None:
        st.decisions.move_servers.append(
            MoveServer(
                rj.job.id, unit.server.index, unit.server.node_id, st.cap.node_ids[unit.to], why
            )
        )
        return
    assert unit.worker is not None
    st.decisions.remove_workers.append(
        RemoveWorker(rj.job.id, unit.worker.index, unit.worker.node_id, why)
    )
