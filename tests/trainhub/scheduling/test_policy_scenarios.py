"""Scenarios of the fair-share policy: borrow and reclaim, aging, elastic grow and shrink."""

from __future__ import annotations

from dataclasses import replace

from trainhub.scheduling.policy import (
    CORDONED,
    PENDING,
    RUNNING,
    Job,
    Node,
    PolicyConfig,
    Reservation,
    Resources,
    Snapshot,
    Team,
    schedule,
)
from trainhub.scheduling.simulate import Simulator, cluster_from_dict
from trainhub.scheduling.simulate.inputs import TraceJob

from .driver import apply, job, workers

GPU_WORKER = Resources(2, 8000, 1)


def _two_teams(**job_a: object) -> Snapshot:
    nodes = (Node(1, Resources(16, 64000, 4)), Node(2, Resources(16, 64000, 4)))
    teams = (Team("a", Resources(16, 64000, 4)), Team("b", Resources(16, 64000, 4)))
    elastic = Job(
        1,
        "a",
        "normal",
        PENDING,
        0.0,
        GPU_WORKER,
        workers_min=2,
        workers_max=6,
        freeze_seconds=60,
        **job_a,  # type: ignore[arg-type]
    )
    fixed = Job(2, "a", "offline", PENDING, 0.0, GPU_WORKER, workers_min=2)
    return Snapshot(0.0, nodes, teams, (elastic, fixed))


def _borrowing(now: float) -> Snapshot:
    """Team a runs both jobs and, after the freeze window, has grown into b's idle GPUs."""
    snap = _two_teams()
    snap = apply(snap, schedule(snap), 0.0)
    assert {j.state for j in snap.jobs} == {RUNNING}
    snap = replace(snap, now=61.0)
    d = schedule(snap)
    assert len(d.add_workers) == 4 and all(a.task.borrowed for a in d.add_workers)
    snap = apply(snap, d, 61.0)
    assert workers(job(snap, 1)) == 6
    b_job = Job(10, "b", "normal", PENDING, now, GPU_WORKER, workers_min=4)
    a_more = Job(11, "a", "normal", PENDING, now, GPU_WORKER, workers_min=1)
    return replace(snap, now=now, jobs=(*snap.jobs, b_job, a_more))


def test_borrower_shrinks_to_give_back_quota_and_the_owner_starts_next_cycle() -> None:
    snap = _borrowing(now=200.0)  # outside the elastic job's freeze window
    d = schedule(snap)
    assert {(r.job_id, r.index) for r in d.remove_workers} == {(1, 2), (1, 3), (1, 4), (1, 5)}
    assert d.preemptions == [] and d.starts == []
    assert "capacity reclaimed for it" in d.pending_reasons[10]
    assert d.pending_reasons[11].startswith("team quota exhausted: gpu 4/4")
    assert {r.job_id for r in d.reservations} == {10}
    snap = apply(snap, d, 201.0)
    d = schedule(snap)
    assert [s.job_id for s in d.starts] == [10]
    assert not any(t.borrowed for t in d.starts[0].tasks)
    assert d.reservations == [] and 11 in d.pending_reasons


def test_a_job_started_on_its_reservation_starts_once() -> None:
    # Its team has quota to spare, so a second try in fair order would start it again.
    nodes = (Node(1, Resources(16, 64000, 8)),)
    teams = (Team("a", Resources(16, 64000, 8)),)
    waiting = Job(5, "a", "normal", PENDING, 0.0, GPU_WORKER, workers_min=2)
    held = Reservation(5, 1, Resources(4, 16000, 2), 90.0)
    d = schedule(Snapshot(100.0, nodes, teams, (waiting,), reservations=(held,)))
    assert [s.job_id for s in d.starts] == [5]


def test_a_frozen_borrower_is_preempted_instead_and_production_never_is() -> None:
    snap = _borrowing(now=100.0)  # job 1 was resized at 61 and is frozen until 121
    d = schedule(snap)
    assert d.remove_workers == []
    assert [p.job_id for p in d.preemptions] == [1]
    snap = apply(snap, d, 101.0)
    d = schedule(snap)
    # b's job starts; the requeued job resumes at its minimum on a's own quota.
    starts = {s.job_id: s.tasks for s in d.starts}
    assert set(starts) == {10, 1}
    assert len(starts[1]) == 2 and not any(t.borrowed for t in starts[1])

    prod = _borrowing(now=100.0)
    prod = replace(
        prod, jobs=tuple(replace(j, priority="production") if j.id == 1 else j for j in prod.jobs)
    )
    d = schedule(prod)
    assert d.preemptions == [] and d.remove_workers == []
    assert d.pending_reasons[10] == "its team's idle quota is lent out and cannot be reclaimed yet"


def test_reserved_capacity_is_not_taken_by_another_job() -> None:
    snap = _borrowing(now=200.0)
    snap = apply(snap, schedule(snap), 201.0)
    # A newcomer of team c (no quota: it may only borrow) must not take what b waits for.
    snap = replace(
        snap,
        teams=(*snap.teams, Team("c", Resources())),
        jobs=(
            Job(9, "c", "normal", PENDING, 150.0, GPU_WORKER, workers_min=4),
            *snap.jobs,
        ),
    )
    d = schedule(snap)
    assert [s.job_id for s in d.starts] == [10]
    assert 9 in d.pending_reasons


def test_cpu_jobs_keep_off_gpu_nodes_and_are_evicted_first_for_a_gpu_job() -> None:
    nodes = (Node(1, Resources(8, 32000, 0)), Node(2, Resources(16, 64000, 2)))
    teams = (Team("a", Resources(24, 96000, 2)), Team("b", Resources()))
    cpu_small = Job(1, "b", "normal", PENDING, 0.0, Resources(4, 8000), workers_min=2)
    d = schedule(Snapshot(0.0, nodes, teams, (cpu_small,)))
    assert {t.node_id for t in d.starts[0].tasks} == {1}
    # A CPU job that does not fit the CPU node spills onto the GPU node, leaving CPU beside
    # its GPUs, and is the first evicted when a GPU job needs that node.
    snap = Snapshot(0.0, nodes, teams, (replace(cpu_small, workers_min=4),))
    snap = apply(snap, schedule(snap), 0.0)
    assert {t.node_id for t in job(snap, 1).tasks} == {1, 2}
    gpu_job = Job(2, "a", "normal", PENDING, 5.0, Resources(6, 16000, 1), workers_min=2)
    snap = replace(snap, now=5.0, jobs=(*snap.jobs, gpu_job))
    d = schedule(snap)
    assert [p.job_id for p in d.preemptions] == [1]
    snap = apply(snap, d, 6.0)
    d = schedule(snap)
    assert [s.job_id for s in d.starts] == [2]
    assert {t.node_id for t in d.starts[0].tasks} == {2}


def test_ps_shards_spread_and_cordoned_nodes_get_nothing() -> None:
    nodes = (
        *(Node(i, Resources(8, 32000)) for i in range(1, 4)),
        Node(4, Resources(64, 256000), state=CORDONED),
    )
    j = Job(
        1,
        "a",
        "normal",
        PENDING,
        0.0,
        Resources(1, 1000),
        workers_min=1,
        ps_count=3,
        ps=Resources(1, 1000),
        coordinator=Resources(0.5, 500),
    )
    d = schedule(Snapshot(0.0, nodes, (Team("a", Resources(100, 400000)),), (j,)))
    ps_nodes = [t.node_id for t in d.starts[0].tasks if t.role == "ps"]
    assert sorted(ps_nodes) == [1, 2, 3]
    assert all(t.node_id != 4 for t in d.starts[0].tasks)
    big = replace(j, id=2, worker=Resources(32, 1000))
    d = schedule(Snapshot(0.0, nodes, (Team("a", Resources(100, 400000)),), (big,)))
    assert d.pending_reasons[2] == "no node has 32 free CPUs (at most 8 free on any node)"


def test_gpu_reason_names_the_missing_gpus() -> None:
    nodes = (Node(1, Resources(32, 64000, 4)),)
    j = Job(1, "a", "normal", PENDING, 0.0, Resources(2, 1000, 1), workers_min=2)
    snap = Snapshot(0.0, nodes, (Team("a", Resources(32, 64000, 8)),), (j, replace(j, id=2)))
    snap = apply(snap, schedule(snap), 0.0)
    late = replace(j, id=3, worker=Resources(2, 1000, 2), workers_min=1)
    d = schedule(replace(snap, jobs=(*snap.jobs, late)))
    assert d.pending_reasons[3] == "no node has 2 free GPUs (at most 0 free on any node)"
    quota = replace(snap, teams=(Team("a", Resources(32, 64000, 4)),))
    d = schedule(replace(quota, jobs=(*quota.jobs, replace(late, priority="production"))))
    assert d.pending_reasons[3].startswith("team quota exhausted: gpu 4/4")


def test_a_fragmented_cluster_says_how_much_is_free_and_where() -> None:
    """Every task fits some node and the gang fits the cluster's free total, yet not all
    together: the reason gives the totals and the most free on one node."""
    nodes = (Node(1, Resources(2, 64000)), Node(2, Resources(2, 64000)))
    j = Job(1, "a", "normal", PENDING, 0.0, Resources(1.2, 1000), workers_min=3)
    d = schedule(Snapshot(0.0, nodes, (Team("a", Resources(4, 128000)),), (j,)))
    assert d.pending_reasons[1] == (
        "free resources are fragmented: no placement fits all 3 tasks together "
        "(they need 3.6 CPUs in all, 4 are free, at most 2 on one node)"
    )


def test_elastic_job_grows_into_idle_capacity_and_shrinks_back_outside_its_freeze() -> None:
    nodes = (Node(1, Resources(8, 32000)),)
    teams = (Team("x", Resources()), Team("y", Resources()))  # both only borrow: fair share
    e = Job(
        1,
        "x",
        "normal",
        PENDING,
        0.0,
        Resources(2, 1000),
        workers_min=1,
        workers_max=4,
        freeze_seconds=100,
    )
    snap = Snapshot(0.0, nodes, teams, (e,))
    snap = apply(snap, schedule(snap), 0.0)
    snap = replace(snap, now=50.0)
    assert schedule(snap).add_workers == []  # frozen since its start
    snap = replace(snap, now=100.0)
    d = schedule(snap)
    assert len(d.add_workers) == 3
    snap = apply(snap, d, 100.0)
    y = Job(2, "y", "normal", PENDING, 120.0, Resources(4, 1000), workers_min=1)
    snap = replace(snap, now=150.0, jobs=(*snap.jobs, y))
    d = schedule(snap)
    assert d.remove_workers == [] and d.preemptions == []  # x is frozen until 200
    assert "no idle quota to borrow (cpu 0 lendable)" in d.pending_reasons[2]
    snap = replace(snap, now=200.0)
    d = schedule(snap)
    assert [(r.job_id, r.index) for r in d.remove_workers] == [(1, 3), (1, 2)]
    snap = apply(snap, d, 201.0)
    d = schedule(snap)
    assert [s.job_id for s in d.starts] == [2] and d.add_workers == []
    assert workers(job(snap, 1)) == 2


def test_low_priority_job_behind_a_stream_of_higher_priority_jobs_starts_in_bounded_time() -> None:
    cluster = cluster_from_dict(
        {
            "node_groups": [{"count": 1, "cpu": 4, "memory_mb": 8000}],
            "teams": [{"name": "t", "quota": {"cpu": 4, "memory_mb": 8000}}],
        }
    )

    def row(i: int, t: float, priority: str) -> TraceJob:
        return TraceJob(i, t, "t", priority, 100.0, 1, 1, 0, 4, 0, 1000)

    stream = [row(i + 2, i * 50.0, "normal") for i in range(200)]  # always one waiting
    trace = [row(1, 10.0, "experiment"), *stream]
    aging = PolicyConfig(aging_seconds_per_level=600)
    sim = Simulator(cluster, trace, policy="cfs", config=aging, check=True)
    sim.run()
    start = sim.started[1] - 10.0
    assert start <= 3 * 600 + 100  # three levels of aging, then the running job's end
    starved = Simulator(cluster, trace, policy="priority", check=True)
    starved.run()
    assert starved.started[1] - 10.0 > 10 * start


def test_a_node_that_shrank_under_its_tasks_has_nothing_free_not_less() -> None:
    """A node's reported capacity can drop below what its running tasks hold; a reason
    says it has 0 free, never a negative amount."""
    nodes = (Node(1, Resources(8, 64000)),)
    team = Team("a", Resources(100, 400000))
    running = Job(1, "a", "normal", PENDING, 0.0, Resources(6, 1000), workers_min=1)
    snap = apply(
        Snapshot(0.0, nodes, (team,), (running,)),
        schedule(Snapshot(0.0, nodes, (team,), (running,))),
        0.0,
    )
    shrunk = replace(snap, nodes=(Node(1, Resources(2, 64000)),))
    late = Job(2, "a", "normal", PENDING, 1.0, Resources(1, 1000), workers_min=1)
    d = schedule(replace(shrunk, jobs=(*shrunk.jobs, late)))
    assert d.pending_reasons[2] == "no node has 1 free CPUs (at most 0 free on any node)"
