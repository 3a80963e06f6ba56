"""Invariants of the fair-share policy over random clusters, quotas and job mixes."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from trainhub.scheduling.policy import (
    COORDINATOR,
    LOST,
    PENDING,
    PRIORITY_WEIGHTS,
    PS,
    READY,
    RUNNING,
    WORKER,
    Decisions,
    Job,
    Resources,
    Snapshot,
    schedule,
)
from trainhub.scheduling.simulate import Simulator, cluster_from_dict
from trainhub.scheduling.simulate.inputs import TraceJob

from .driver import apply
from .strategies import clusters, lent_clusters

EPS = 1e-6
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_cycle(before: Snapshot, d: Decisions, after: Snapshot) -> None:
    jobs = {j.id: j for j in before.jobs}
    nodes = {n.id: n for n in before.nodes}
    # Every pending job either starts or has a reason; gangs start whole.
    started = {s.job_id: s for s in d.starts}
    for j in before.jobs:
        if j.state == PENDING and j.id not in started:
            assert d.pending_reasons.get(j.id), f"job {j.id} waits without a reason"
    for s in d.starts:
        j = jobs[s.job_id]
        assert j.state == PENDING
        roles = sorted((t.role, t.index) for t in s.tasks)
        expected = sorted(
            ([(COORDINATOR, 0)] if not j.coordinator.is_zero else [])
            + [(PS, i) for i in range(j.ps_count)]
            + [(WORKER, i) for i in range(j.workers_min)]
        )
        assert roles == expected
    # Nothing new on cordoned or lost nodes; GPU work only on GPU nodes.
    new = [t for s in d.starts for t in s.tasks] + [a.task for a in d.add_workers]
    for t in new:
        assert nodes[t.node_id].state == READY
        if t.resources.gpu:
            assert nodes[t.node_id].has_gpus
    # Production is never preempted, never shrunk and never borrows.
    for p in d.preemptions:
        assert not jobs[p.job_id].is_production
    for r in d.remove_workers:
        assert not jobs[r.job_id].is_production
    for t in [t for s in d.starts for t in s.tasks if jobs[s.job_id].is_production]:
        assert not t.borrowed
    # Nothing resized inside its freeze window.
    for job_id in {a.job_id for a in d.add_workers} | {r.job_id for r in d.remove_workers}:
        j = jobs[job_id]
        assert j.last_rescale_time is None or before.now >= j.last_rescale_time + j.freeze_seconds
        assert j.workers_min <= _workers_after(after, job_id) <= j.workers_max
    _check_capacity_and_quota(after)


def _workers_after(snap: Snapshot, job_id: int) -> int:
    j = next(j for j in snap.jobs if j.id == job_id)
    return sum(1 for t in j.tasks if t.role == WORKER)


def _check_capacity_and_quota(snap: Snapshot) -> None:
    used: dict[int, Resources] = defaultdict(Resources)
    team_used: dict[str, Resources] = defaultdict(Resources)
    for j in snap.jobs:
        for t in j.tasks:
            used[t.node_id] = used[t.node_id] + t.resources
            team_used[j.team] = team_used[j.team] + t.resources
    for n in snap.nodes:
        assert used[n.id].fits_in(n.capacity), f"node {n.id} over-committed"
    capacity = Resources()
    for n in snap.nodes:
        if n.state != LOST:
            capacity = capacity + n.capacity
    # No team above nominal + borrowing limit; no lender above its lending limit: what is
    # borrowed fits in the idle quota lenders may lend plus capacity no quota covers.
    teams = {t.name: t for t in snap.teams}
    for r in range(3):
        cap = capacity.as_tuple()[r]
        nominal_total = sum(t.nominal.as_tuple()[r] for t in snap.teams)
        borrowed = lendable = 0.0
        for name, team in teams.items():
            u, nom = team_used[name].as_tuple()[r], team.nominal.as_tuple()[r]
            assert u <= nom + team.borrowing_limit.as_tuple()[r] + EPS
            borrowed += max(0.0, u - nom)
            lendable += min(team.lending_limit.as_tuple()[r], max(0.0, nom - u))
        for name, res in team_used.items():
            if name not in teams:
                borrowed += res.as_tuple()[r]
        assert borrowed <= lendable + max(0.0, cap - nominal_total) + EPS


@SETTINGS
@given(clusters(), st.randoms(use_true_random=False))
def test_invariants_hold_over_cycles(snap: Snapshot, rng: random.Random) -> None:
    now = 0.0
    for _ in range(6):
        d = schedule(snap)
        assert schedule(snap) == d, "the same snapshot must give the same decisions"
        after = apply(snap, d, now)
        _check_cycle(snap, d, after)
        # Time passes: some running jobs finish, later submissions arrive.
        now += rng.choice([1.0, 40.0, 120.0])
        jobs = tuple(j for j in after.jobs if not (j.state == RUNNING and rng.random() < 0.2))
        snap = replace(after, now=now, jobs=jobs)


@SETTINGS
@given(clusters())
def test_decisions_do_not_depend_on_the_order_of_the_snapshot(snap: Snapshot) -> None:
    first = schedule(snap)
    snap = apply(snap, first, 0.0)
    snap = replace(snap, now=200.0)
    shuffled = replace(
        snap,
        jobs=tuple(reversed(snap.jobs)),
        teams=tuple(reversed(snap.teams)),
    )
    assert schedule(shuffled) == schedule(snap)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from(["cfs", "fifo", "priority"]))
def test_random_traces_replay_to_the_end_without_overcommitting(seed: int, policy: str) -> None:
    rng = random.Random(seed)
    cluster = cluster_from_dict(
        {
            "node_groups": [
                {"count": rng.randint(1, 3), "cpu": 16, "memory_mb": 65536, "gpu": 4},
                {"count": rng.randint(0, 2), "cpu": 16, "memory_mb": 65536},
            ],
            "teams": [
                {"name": "a", "quota": {"cpu": 16, "memory_mb": 65536, "gpu": 4}},
                {
                    "name": "b",
                    "quota": {"cpu": 8, "memory_mb": 32768, "gpu": 2},
                    "borrowing_limit": {"gpu": rng.choice([0, 2])},
                },
            ],
        }
    )
    trace = []
    for i in range(rng.randint(1, 30)):
        mn = rng.randint(1, 2)
        trace.append(
            TraceJob(
                i + 1,
                rng.uniform(0, 2000),
                rng.choice("ab"),
                rng.choice(list(PRIORITY_WEIGHTS)),
                rng.uniform(10, 1500),
                mn,
                mn + rng.choice([0, 0, 2]),
                rng.choice([0, 1]),
                rng.choice([1, 2]),
                rng.choice([0, 1]),
                4096,
            )
        )
    trace.sort(key=lambda j: j.submit_time_s)
    sim = Simulator(cluster, trace, policy=policy, check=True)
    report = sim.run()
    assert report.jobs == len(trace) == len(sim.ended)


def _outcome(d: Decisions, job_id: int) -> tuple[object, ...]:
    """Where the job starts, what it reserves, and whether it waits. (Not the reason's
    words: a whole cycle reuses a "does not fit" reason worded earlier in the cycle for
    the same gang shape, a preview words it afresh.)"""
    start = next((s for s in d.starts if s.job_id == job_id), None)
    reserved = [r for r in d.reservations if r.job_id == job_id]
    return (start, reserved, job_id in d.pending_reasons)


@SETTINGS
@given(clusters(), st.randoms(use_true_random=False))
def test_a_preview_gives_each_job_what_the_whole_cycle_gives_it(
    snap: Snapshot, rng: random.Random
) -> None:
    """`schedule(until=job)` stops early, yet decides that job as the whole cycle does."""
    for _ in range(3):
        full = schedule(snap)
        for job in snap.jobs:
            if job.state == PENDING:
                assert _outcome(schedule(snap, until=job.id), job.id) == _outcome(full, job.id)
        snap = replace(apply(snap, full, snap.now), now=snap.now + rng.choice([1.0, 120.0]))


def _check_started_once(d: Decisions) -> None:
    """A job starts at most once in a cycle, and nothing else is decided for it there: no
    reason to wait, no reservation, no resize, no preemption."""
    started = [s.job_id for s in d.starts]
    assert len(started) == len(set(started)), f"a job started twice in one cycle: {started}"
    also = {
        "waits": set(d.pending_reasons),
        "keeps a reservation": {r.job_id for r in d.reservations},
        "grows": {a.job_id for a in d.add_workers},
        "shrinks": {r.job_id for r in d.remove_workers},
        "is preempted": {p.job_id for p in d.preemptions},
        "has a server moved": {m.job_id for m in d.move_servers},
    }
    for what, ids in also.items():
        assert not ids & set(started), f"jobs {sorted(ids & set(started))} start and {what}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lent_clusters(), st.randoms(use_true_random=False))
def test_a_job_starts_at_most_once_per_cycle(
    drawn: tuple[Snapshot, tuple[Job, ...]], rng: random.Random
) -> None:
    """Also in the cycle that starts a job on the capacity reclaimed for it earlier: that
    start comes before the fair-order pass, which must not try the job again."""
    snap, later = drawn
    for cycle in range(5):
        d = schedule(snap)
        _check_started_once(d)
        reserved = {r.job_id for r in snap.reservations}
        if any(s.job_id in reserved for s in d.starts):
            event("a job started on its reservation")
        after = apply(snap, d, snap.now)
        _check_cycle(snap, d, after)
        now = snap.now + rng.choice([40.0, 700.0])
        jobs = [j for j in after.jobs if not (j.state == RUNNING and rng.random() < 0.1)]
        if cycle == 1:  # the owner's jobs arrive and reclaim its lent quota
            jobs += [replace(j, submit_time=now, pending_since=now) for j in later]
        snap = replace(after, now=now, jobs=tuple(sorted(jobs, key=lambda j: j.id)))
