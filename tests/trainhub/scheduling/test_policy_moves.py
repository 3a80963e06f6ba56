"""Reclaim moves a server of a borrowing job with replicated shards instead of preempting
the job, when what blocks the owner's job is room on one node rather than capacity."""

from __future__ import annotations

from dataclasses import replace

from trainhub.scheduling.policy import (
    COORDINATOR,
    PENDING,
    PS,
    RUNNING,
    WORKER,
    Job,
    MoveServer,
    Node,
    Resources,
    Snapshot,
    Task,
    Team,
    schedule,
)

NOW = 10_000.0
MEM = 1024.0


def _cpu(cpu: float) -> Resources:
    return Resources(cpu, MEM, 0)


def _running(
    job_id: int, node: int, *, ps: int, ps_replication: int, worker: float, ran: float = 5.0
) -> Job:
    """A job of team `lab` (which owns no quota: all of it borrowed), all on `node`."""
    tasks = (
        Task(COORDINATOR, 0, node, _cpu(0.25), borrowed=True),
        *(Task(PS, i, node, _cpu(0.25), borrowed=True) for i in range(ps)),
        Task(WORKER, 0, node, _cpu(worker), borrowed=True),
    )
    return Job(
        job_id,
        "lab",
        "experiment",
        RUNNING,
        0.0,
        _cpu(worker),
        ps_count=ps,
        ps=_cpu(0.25),
        coordinator=_cpu(0.25),
        tasks=tasks,
        started_at=NOW - ran,
        ps_replication=ps_replication,
    )


def _snapshot(replication: int) -> Snapshot:
    """Two 2-CPU nodes. On node 1 an unreplicated job leaves 0.5 CPU free; on node 2 a job
    with 3 servers leaves 0.5 free. recsys (owning the quota) needs 0.75 CPU on one node
    for its worker plus 0.25 elsewhere: it fits the free CPU in total, on no node."""
    nodes = (Node(1, Resources(2, 16 * MEM, 0)), Node(2, Resources(2, 16 * MEM, 0)))
    teams = (Team("recsys", Resources(2, 16 * MEM, 0)), Team("lab", Resources(0, 0, 0)))
    jobs = (
        _running(1, 1, ps=1, ps_replication=0, worker=1.0),
        _running(2, 2, ps=3, ps_replication=replication, worker=0.5),
        Job(
            9,
            "recsys",
            "normal",
            PENDING,
            NOW - 1,
            _cpu(0.75),
            ps_count=1,
            ps=_cpu(0.125),
            coordinator=_cpu(0.125),
        ),
    )
    return Snapshot(NOW, nodes, teams, jobs)


def test_a_server_of_a_replicated_borrower_moves_and_nobody_is_preempted() -> None:
    d = schedule(_snapshot(replication=1))
    assert d.preemptions == [] and d.remove_workers == []
    assert len(d.move_servers) == 1
    move = d.move_servers[0]
    assert (move.job_id, move.from_node_id, move.to_node_id) == (2, 2, 1)
    assert move.index in (0, 1, 2)
    assert "making room for job 9" in move.reason
    # The owner's job waits for the capacity the move frees on node 2 (its worker).
    assert {r.node_id for r in d.reservations if r.job_id == 9} >= {2}
    assert all(r.job_id == 9 for r in d.reservations)


def test_without_replication_the_same_reclaim_preempts() -> None:
    d = schedule(_snapshot(replication=0))
    assert d.move_servers == []
    assert [p.job_id for p in d.preemptions]


def test_a_move_the_job_does_not_need_is_not_made() -> None:
    snap = _snapshot(replication=1)
    # With a 1.5-CPU node free the owner's job fits as things are: nothing is taken.
    bigger = replace(snap, nodes=(*snap.nodes, Node(3, Resources(2, 16 * MEM, 0))))
    d = schedule(bigger)
    assert d.move_servers == [] and d.preemptions == []
    assert [s.job_id for s in d.starts] == [9]


def test_moves_are_decided_for_reclaim_only_not_for_fair_share() -> None:
    snap = _snapshot(replication=1)
    # recsys over its own quota: the job would borrow, so it may not reclaim anything.
    teams = (Team("recsys", Resources(0.5, 16 * MEM, 0)), Team("lab", Resources(0, 0, 0)))
    d = schedule(replace(snap, teams=teams))
    assert d.move_servers == [] and d.preemptions == []


def test_on_nodes_without_isolation_a_move_clears_a_node_of_the_borrowing_team() -> None:
    """Nodes that host one team at a time: server 1 is the borrower's only task on node 2,
    so moving it to node 1 (its team's already) leaves node 2 to the quota's owner."""
    nodes = tuple(Node(i, Resources(2, 16 * MEM, 0), isolated=False) for i in (1, 2))
    teams = (Team("recsys", Resources(2, 16 * MEM, 0)), Team("lab", Resources(0, 0, 0)))
    job = _running(2, 1, ps=3, ps_replication=1, worker=0.5)
    tasks = tuple(replace(t, node_id=2) if (t.role, t.index) == (PS, 1) else t for t in job.tasks)
    owner = Job(9, "recsys", "normal", PENDING, NOW - 1, _cpu(0.5), ps_count=1, ps=_cpu(0.25))
    snap = Snapshot(NOW, nodes, teams, (replace(job, tasks=tasks), owner))
    d = schedule(snap)
    assert d.preemptions == []
    assert d.move_servers == [MoveServer(2, 1, 2, 1, "making room for job 9 of team recsys")]
    assert {r.node_id for r in d.reservations} == {2}
    # Unreplicated, the same job is preempted instead.
    unreplicated = replace(job, tasks=tasks, ps_replication=0)
    d = schedule(replace(snap, jobs=(unreplicated, owner)))
    assert d.move_servers == [] and [p.job_id for p in d.preemptions] == [2]
