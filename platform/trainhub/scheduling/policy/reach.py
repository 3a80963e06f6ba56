"""The most room reclaim could ever make on each node in a cycle: a bound that lets an
attempt that cannot succeed end before it takes any victim.

When a job's gang found no placement as the nodes are, taking victims helps only if a
node some unit frees could then take one of its tasks (`Capacity.could_take`: room, and
no other team's tasks there unless the node isolates them). The units an attempt may
take are whole jobs preempted (borrowers, for reclaim; CPU jobs on GPU nodes, for a GPU
job), the workers an elastic job may shed (those above its minimum, highest index
first) and the servers that may move away (of borrowers, for reclaim: counted with
them), of the teams that may give way
(`reclaim._teams`; they only get fewer as units are taken). So during the attempt a
node's free capacity never exceeds what is free at its start plus what those units hold
there, and another team's hold on it ends only if those units are all of it. When no
READY node that such a unit touches could take a task of any of the gang's shapes even
then, the attempt would take up to `MAX_VICTIM_UNITS` units, place nothing and give
them all back: `could_ever_host` gives the same answer without the work.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .model import EPSILON, WORKER, Resources, Task
from .state import CycleState, RunningJob


@dataclass
class Reach:
    """Per kind of unit, per team: the (CPU, memory, GPUs) and the number of tasks it
    could free on each node position, as (nodes, 4) arrays; which nodes are READY."""

    ready: np.ndarray
    kinds: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def add(self, kind: str, rj: RunningJob, tasks: Iterable[Task], st: CycleState) -> None:
        if rj.job.is_production:  # never gives way
            return
        teams = self.kinds.setdefault(kind, {})
        held = teams.get(rj.job.team)
        if held is None:
            held = teams[rj.job.team] = np.zeros((len(self.ready), 4))
        for t in tasks:
            pos = st.cap.position.get(t.node_id)
            if pos is not None:
                held[pos] += (t.resources.cpu, t.resources.memory_mb, t.resources.gpu, 1)


def build_reach(
    st: CycleState,
    *,
    borrowers: Iterable[RunningJob],
    cpu_on_gpu: Iterable[RunningJob],
    elastic: Iterable[RunningJob],
) -> Reach:
    """What each kind of victim could free, per team and node (`victims.Victims`)."""
    reach = Reach(np.asarray(st.cap.ready, dtype=bool))
    for rj in borrowers:
        reach.add("borrowers", rj, rj.tasks, st)
    for rj in cpu_on_gpu:
        reach.add("cpu_on_gpu", rj, rj.tasks, st)
    for rj in elastic:
        workers = sorted((t for t in rj.tasks if t.role == WORKER), key=lambda t: t.index)
        shed = max(0, rj.workers - rj.job.workers_min)
        reach.add("elastic", rj, workers[len(workers) - shed :] if shed else (), st)
    return reach


def could_ever_host(
    st: CycleState,
    reach: Reach,
    job_team: str,
    teams: Collection[str],
    kinds: Collection[str],
    shapes: Sequence[Resources],
) -> bool:
    """Whether some READY node that a unit of `kinds` of `teams` touches could take a
    task of one of `shapes` for `job_team` if every such unit were taken: a necessary
    condition of `could_take` holding on a node a unit frees during the attempt."""
    cap = st.cap
    n = len(reach.ready)
    freeable: dict[str, np.ndarray] = {}
    for kind in kinds:
        held = reach.kinds.get(kind, {})
        for team in teams:
            if team in held:
                freeable[team] = freeable.get(team, 0) + held[team]
    if not shapes or not freeable:
        return False
    total = sum(freeable.values())
    assert isinstance(total, np.ndarray)
    touched = reach.ready & (total[:, 3] > 0)
    for pos in np.flatnonzero(touched).tolist():  # could another team's hold end?
        if cap.isolated[pos]:
            continue
        for team, count in cap.teams[pos].items():
            if team != job_team and (team not in freeable or freeable[team][pos, 3] < count):
                touched[pos] = False
                break
    if not touched.any():
        return False
    free = np.column_stack((cap.cpu, cap.mem, cap.gpu)).astype(float)[touched]
    room = free + total[touched, :3] + EPSILON
    need = np.array([(r.cpu, r.memory_mb, r.gpu) for r in shapes], dtype=float)
    assert room.shape[1] == need.shape[1] and n == len(cap.cpu)
    return bool((room[:, None, :] >= need[None, :, :]).all(axis=2).any())
