"""The bound that ends a make-room attempt before it takes any victim (`policy/reach.py`):
it never changes a decision, and it does end the attempts it is for."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from trainhub.scheduling.policy import (
    PENDING,
    RUNNING,
    WORKER,
    Decisions,
    Job,
    Node,
    Resources,
    Snapshot,
    Task,
    Team,
    reclaim,
    schedule,
)
from trainhub.scheduling.policy.state import CycleState
from trainhub.scheduling.policy.units import Unit

from .driver import apply
from .strategies import lent_clusters

GPU = Resources(2, 8000, 1)
NOW = 10_000.0


@contextmanager
def _bound(answer: Callable[..., bool] | None) -> Iterator[list[bool]]:
    """Within: `reclaim._could_ever_host` answers with `answer` (None: the real one); the
    real one's answers are listed."""
    real = reclaim._could_ever_host
    answers: list[bool] = []

    def recorded(st: CycleState, job: Job, reclaim: bool, shapes: list[Resources]) -> bool:
        answers.append(real(st, job, reclaim, shapes))
        return answers[-1] if answer is None else answer(st, job, reclaim, shapes)

    reclaim._could_ever_host = recorded
    try:
        yield answers
    finally:
        reclaim._could_ever_host = real


def _decide(snap: Snapshot) -> tuple[Decisions, Decisions, list[bool]]:
    """The decisions with the bound, without it (every attempt runs), and its answers."""
    with _bound(None) as answers:
        bounded = schedule(snap)
    with _bound(lambda *args: True):
        whole = schedule(snap)
    return bounded, whole, answers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lent_clusters(), st.randoms(use_true_random=False))
def test_the_bound_changes_no_decision(
    drawn: tuple[Snapshot, tuple[Job, ...]], rng: random.Random
) -> None:
    """Over random clusters where borrowers hold an owner's quota (and some nodes host one
    team at a time), cycle after cycle: the same decisions with the bound as without."""
    snap, later = drawn
    nodes = tuple(replace(n, isolated=rng.random() < 0.5) for n in snap.nodes)
    snap = replace(snap, nodes=nodes)
    for cycle in range(5):
        bounded, whole, answers = _decide(snap)
        assert bounded == whole
        if False in answers:
            event("an attempt ended by the bound")
        after = apply(snap, bounded, snap.now)
        now = snap.now + rng.choice([40.0, 700.0])
        jobs = [j for j in after.jobs if not (j.state == RUNNING and rng.random() < 0.1)]
        if cycle == 1:  # the owner's jobs arrive and reclaim its lent quota
            jobs += [replace(j, submit_time=now, pending_since=now) for j in later]
        snap = replace(after, now=now, jobs=tuple(sorted(jobs, key=lambda j: j.id)))


def _running(job_id: int, team: str, gpus: int, node: int, *, borrowed: bool) -> Job:
    tasks = tuple(Task(WORKER, i, node, GPU, borrowed=borrowed) for i in range(gpus))
    return Job(
        job_id,
        team,
        "normal",
        RUNNING,
        0.0,
        GPU,
        workers_min=gpus,
        tasks=tasks,
        started_at=NOW - 5_000,
        last_rescale_time=NOW - 5_000,
    )


def _shared_node_cluster(c_gpus: int) -> Snapshot:
    """One 8-GPU node that hosts one team at a time: team b borrows 4 - `c_gpus` GPUs
    there, next to team c's `c_gpus` on c's own quota; a (quota 4 GPUs, 4 of the node's
    free) wants 4, which the node refuses while another team's tasks run there."""
    node = Node(1, Resources(16, 64000, 8), isolated=False)
    teams = (
        Team("a", Resources(8, 32000, 4)),
        Team("b", Resources()),
        Team("c", Resources(8, 32000, 4)),
    )
    jobs = [_running(1, "b", 4 - c_gpus, 1, borrowed=True)]
    if c_gpus:
        jobs.append(_running(2, "c", c_gpus, 1, borrowed=False))
    jobs.append(Job(3, "a", "normal", PENDING, NOW, GPU, workers_min=4))
    return Snapshot(NOW, (node,), teams, tuple(jobs))


def test_an_attempt_that_no_preemption_can_help_takes_no_victim() -> None:
    """Team c's job stays on the node whatever b gives back, so a can never get it: the
    attempt ends before it takes a unit, with the reason it gives without the bound."""
    taken: list[Unit] = []
    real_take = reclaim.take_unit

    def take(st: CycleState, unit: Unit) -> None:
        taken.append(unit)
        real_take(st, unit)

    reclaim.take_unit = take
    try:
        bounded, whole, answers = _decide(_shared_node_cluster(c_gpus=1))
        assert answers == [False]
        assert bounded == whole and bounded.preemptions == [] and 3 in bounded.pending_reasons
        del taken[:]
        with _bound(None):
            schedule(_shared_node_cluster(c_gpus=1))
        assert taken == []
    finally:
        reclaim.take_unit = real_take


def test_an_attempt_that_preemption_can_help_runs() -> None:
    """Without team c on the shared node, preempting b's job gives a its room: the bound
    lets the attempt run, and b's job is preempted for a."""
    bounded, whole, answers = _decide(_shared_node_cluster(c_gpus=0))
    assert answers == [True]
    assert bounded == whole
    assert [p.job_id for p in bounded.preemptions] == [1]


def test_room_that_only_victims_free_counts() -> None:
    """a's one 4-GPU task finds 3 free GPUs on one node and 1 on the other: the room comes
    only from b's borrowed GPU, which the bound counts, and b is preempted for a."""
    nodes = (Node(1, Resources(16, 64000, 4)), Node(2, Resources(16, 64000, 4)))
    teams = (
        Team("a", Resources(8, 32000, 4)),
        Team("b", Resources()),
        Team("c", Resources(8, 32000, 4)),
    )
    jobs = (
        _running(1, "b", 1, 1, borrowed=True),
        _running(2, "c", 3, 2, borrowed=False),
        Job(3, "a", "normal", PENDING, NOW, Resources(8, 32000, 4), workers_min=1),
    )
    bounded, whole, answers = _decide(Snapshot(NOW, nodes, teams, jobs))
    assert answers == [True]
    assert bounded == whole
    assert [p.job_id for p in bounded.preemptions] == [1]
