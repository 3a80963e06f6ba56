"""What the tasks of running and stopping jobs hold, summed once per set of jobs and kept.

Building a cycle's state walks every task of every job that holds capacity (24,000 on a
cluster of 10,000 jobs): most of a dry run's policy time. A dry run adds one pending job
to the snapshot the last one saw, and a cycle on a quiet cluster sees the same jobs
again; the policy's types are frozen, so the same node and job objects, in the same
order, hold the same capacity. The sums are kept for the last few such sets (`_KEPT`) and
handed out as copies, so the arithmetic, and with it every decision, is the one a fresh
walk does: the same operations in the same order.
"""

from __future__ import annotations

import operator
import threading
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from .model import RUNNING, WORKER, Job, Node, Task
from .placement import Capacity

# Sets of jobs kept; a forecast's runs (a job fewer each time) take the other slots.
_KEPT = 4


@dataclass
class Tally:
    """The capacity the held jobs' tasks take, and each job's working numbers."""

    nodes: Sequence[Node]
    held: Sequence[Job]  # the jobs that are not pending, in the snapshot's order
    cpu: list[float]
    mem: list[float]
    gpu: list[float]
    teams: list[Counter[str]]
    model_free: list[dict[str, float]]
    team_used: dict[str, list[float]]  # what counts against each team's quota
    # Running jobs: (job, active tasks, next worker index, workers).
    running: list[tuple[Job, list[Task], int, int]]
    hits: int = 0


_lock = threading.Lock()
_kept: list[Tally] = []


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def take_held(cap: Capacity, nodes: Sequence[Node], held: list[Job]) -> Tally:
    """Count what `held`'s tasks take on `cap` (built from `nodes`, nothing taken yet);
    the returned tally is shared: read it, never change it."""
    with _lock:
        for kept in _kept:
            if _same(kept.held, held) and _same(kept.nodes, nodes):
                kept.hits += 1
                _restore(cap, kept)
                return kept
    tally = _walk(cap, nodes, held)
    with _lock:
        if len(_kept) >= _KEPT:
            # The least used goes (the oldest of those): a dry run's base set, used
            # again and again, outlives a forecast's sets, each used once.
            _kept.remove(min(_kept, key=lambda t: t.hits))
        _kept.append(tally)
    return tally


def _restore(cap: Capacity, kept: Tally) -> None:
    cap.cpu = list(kept.cpu)
    cap.mem = list(kept.mem)
    cap.gpu = list(kept.gpu)
    cap.teams = [Counter(c) for c in kept.teams]
    cap.model_free = [dict(m) for m in kept.model_free]


def _walk(cap: Capacity, nodes: Sequence[Node], held: list[Job]) -> Tally:
    team_used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    running: list[tuple[Job, list[Task], int, int]] = []
    position = cap.position
    cpu, mem, gpu = cap.cpu, cap.mem, cap.gpu
    for job in held:
        acc = team_used[job.team]
        active: list[Task] = []
        top_worker = -1
        workers = 0
        for t in job.tasks:
            res = t.resources
            pos = position.get(t.node_id)
            if pos is not None:  # tasks hold capacity until they are gone
                cap.occupy(pos, job.team)
                cpu[pos] -= res.cpu
                mem[pos] -= res.memory_mb
                gpu[pos] -= res.gpu
                if res.gpu > 0:
                    cap.hold_model(pos, res)
            if t.role == WORKER and t.index > top_worker:
                top_worker = t.index
            if t.stopping:
                continue
            active.append(t)
            if t.role == WORKER:
                workers += 1
            acc[0] += res.cpu
            acc[1] += res.memory_mb
            acc[2] += res.gpu
        if job.state != RUNNING:
            # STOPPING: holds capacity, no longer counts against its team's quota.
            acc[0] -= sum(t.resources.cpu for t in active)
            acc[1] -= sum(t.resources.memory_mb for t in active)
            acc[2] -= sum(t.resources.gpu for t in active)
            continue
        running.append((job, active, top_worker + 1, workers))
    # Copies: `cap` is this cycle's to change.
    return Tally(
        nodes=tuple(nodes),
        held=tuple(held),
        cpu=list(cpu),
        mem=list(mem),
        gpu=list(gpu),
        teams=[Counter(c) for c in cap.teams],
        model_free=[dict(m) for m in cap.model_free],
        team_used=dict(team_used),
        running=running,
    )
