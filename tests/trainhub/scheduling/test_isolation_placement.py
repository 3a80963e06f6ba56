"""A node without task isolation (isolation "none") hosts one team at a time."""

from __future__ import annotations

from dataclasses import replace

from trainhub.scheduling.policy import (
    PENDING,
    RUNNING,
    Job,
    Node,
    Resources,
    Snapshot,
    StartJob,
    Team,
    schedule,
)

from .driver import apply

WORKER = Resources(2, 4000, 0)


def _snapshot(*nodes: Node, a_cpu: float = 16) -> Snapshot:
    teams = (Team("a", Resources(a_cpu, 64000, 0)), Team("b", Resources(16, 64000, 0)))
    jobs = (
        Job(1, "a", "normal", PENDING, 0.0, WORKER, workers_min=2),
        Job(2, "b", "normal", PENDING, 1.0, WORKER, workers_min=2),
        Job(3, "a", "normal", PENDING, 2.0, WORKER, workers_min=1),
    )
    return Snapshot(10.0, nodes, teams, jobs)


def _nodes_of(starts: list[StartJob]) -> dict[int, set[int]]:
    return {s.job_id: {t.node_id for t in s.tasks} for s in starts}


def test_an_unisolated_node_runs_one_team_and_says_why_the_other_waits() -> None:
    snap = _snapshot(Node(1, Resources(16, 64000, 0), isolated=False))
    d = schedule(snap)
    assert sorted(s.job_id for s in d.starts) == [1, 3]  # team a twice, never b beside it
    reason = d.pending_reasons[2]
    assert "another team (a)" in reason and "isolation: none" in reason
    # Still so while a's job runs; once a's jobs are gone, b gets the node.
    snap = apply(snap, d, 10.0)
    assert 2 in schedule(snap).pending_reasons
    only_b = replace(snap, now=20.0, jobs=tuple(j for j in snap.jobs if j.team == "b"))
    assert [s.job_id for s in schedule(only_b).starts] == [2]


def test_an_isolated_node_is_shared_by_teams() -> None:
    snap = _snapshot(Node(1, Resources(16, 64000, 0)))
    assert sorted(s.job_id for s in schedule(snap).starts) == [1, 2, 3]


def test_teams_spread_over_unisolated_nodes() -> None:
    snap = _snapshot(
        Node(1, Resources(16, 64000, 0), isolated=False),
        Node(2, Resources(16, 64000, 0), isolated=False),
    )
    d = schedule(snap)
    nodes = _nodes_of(list(d.starts))
    assert sorted(nodes) == [1, 2, 3]
    assert nodes[2].isdisjoint(nodes[1] | nodes[3])


def test_a_running_team_keeps_an_unisolated_node_until_its_tasks_are_gone() -> None:
    # Team a borrows (quota 4 CPUs, runs 6), so team b may reclaim.
    snap = _snapshot(Node(1, Resources(16, 64000, 0), isolated=False), a_cpu=4)
    snap = apply(snap, schedule(snap), 10.0)
    assert {j.id for j in snap.jobs if j.state == RUNNING} == {1, 3}
    # A production job of team b may reclaim a's borrowed capacity, but never shares the
    # node with a.
    urgent = Job(4, "b", "production", PENDING, 30.0, WORKER, workers_min=1)
    snap = replace(snap, now=40.0, jobs=(*snap.jobs, urgent))
    for step in range(6):
        d = schedule(snap)
        for start in d.starts:
            job = next(j for j in snap.jobs if j.id == start.job_id)
            running_teams = {
                j.team for j in snap.jobs if j.state != PENDING and j.tasks and j.id != job.id
            }
            assert running_teams <= {job.team}, (step, start, running_teams)
        snap = apply(snap, d, 40.0 + step)
    # Team a's job 1 runs within its quota: b waits for the node, and is told why.
    assert next(j for j in snap.jobs if j.id == 4).state == PENDING
    assert "isolation: none" in schedule(snap).pending_reasons[4]
