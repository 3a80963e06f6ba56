"""Random clusters for the scheduler's property tests (the policy's and the platform's)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from hypothesis import strategies as st
from trainhub.scheduling.policy import (
    LOST,
    PENDING,
    PRIORITY_WEIGHTS,
    READY,
    UNLIMITED,
    Job,
    Node,
    Resources,
    Snapshot,
    Team,
)


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    """A cluster with teams and a mix of pending jobs (the policy places them over cycles)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(1, 8)):
        gpus = rng.choice([0, 0, 2, 4, 8])
        state = rng.choices([READY, "cordoned", LOST], weights=[8, 1, 1])[0]
        nodes.append(Node(i + 1, Resources(rng.choice([8, 16, 32]), 65536, gpus), state=state))
    total = Resources()
    for n in nodes:
        total = total + n.capacity

    def maybe_limit() -> Resources:
        if rng.random() < 0.4:
            return UNLIMITED
        return Resources(rng.choice([0, 4, 8, math.inf]), math.inf, rng.choice([0, 1, 4]))

    teams = []
    n_teams = rng.randint(1, 4)
    for t in range(n_teams):
        share = rng.choice([0.0, 0.25, 0.5]) if t else 0.5
        teams.append(Team(f"t{t}", total.times(share), maybe_limit(), maybe_limit()))
    jobs = []
    for j in range(rng.randint(1, 25)):
        gpu = rng.random() < 0.4
        mn = rng.randint(1, 3)
        jobs.append(
            Job(
                id=j + 1,
                team=f"t{rng.randrange(n_teams)}",
                priority=rng.choice(list(PRIORITY_WEIGHTS)),
                state=PENDING,
                submit_time=float(rng.randint(0, 50)),
                worker=Resources(rng.choice([1, 2, 4]), 4096, 1 if gpu else 0),
                workers_min=mn,
                workers_max=mn + rng.choice([0, 0, 1, 3]),
                ps_count=rng.choice([0, 0, 1, 2]),
                ps=Resources(1, 2048),
                coordinator=rng.choice([Resources(), Resources(0.5, 1024)]),
                freeze_seconds=rng.choice([0, 30, 100]),
            )
        )
    return Snapshot(0.0, tuple(nodes), tuple(teams), tuple(jobs))


@st.composite
def lent_clusters(draw: st.DrawFn) -> tuple[Snapshot, tuple[Job, ...]]:
    """A `clusters()` cluster whose team t0 owns half or all of it and the other teams
    nothing, and t0's jobs held back (the second item) to be submitted later: the others
    borrow t0's idle quota meanwhile, and t0's jobs take it back. That is how the policy
    comes to reserve capacity for a job and start it on its reservation a cycle later,
    which `clusters()` alone, whose jobs all arrive at once, almost never gives."""
    snap = draw(clusters())
    total = Resources()
    for n in snap.nodes:
        if n.state != LOST:
            total = total + n.capacity
    owner = Team("t0", total.times(draw(st.sampled_from([0.5, 1.0]))))
    borrowers = [Team(t.name, Resources()) for t in snap.teams[1:]] or [Team("t1", Resources())]
    names = [owner.name] + [t.name for t in borrowers]
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    jobs = [replace(j, team=rng.choice(names)) for j in snap.jobs]
    later = tuple(j for j in jobs if j.team == owner.name)
    first = tuple(j for j in jobs if j.team != owner.name)
    return replace(snap, teams=(owner, *borrowers), jobs=first), later
