"""A job placed again after its tasks failed at start goes to other nodes first
(`Job.avoid_nodes`, `Capacity.place_gang(avoid=...)`), and to the same node only when
nothing else fits."""

from __future__ import annotations

from trainhub.scheduling.policy import PENDING, Job, Node, Resources, Snapshot, Team, schedule

WORKER = Resources(1, 1000, 0)
TEAM = (Team("a", Resources(64, 256000, 0)),)


def _nodes_of(snap: Snapshot) -> set[int]:
    (start,) = schedule(snap).starts
    return {t.node_id for t in start.tasks}


def test_a_job_avoids_the_node_where_its_tasks_just_failed() -> None:
    # Node 1 is the tighter fit, so best fit picks it unless told to avoid it.
    nodes = (Node(1, Resources(4, 8000, 0)), Node(2, Resources(16, 64000, 0)))
    job = Job(1, "a", "normal", PENDING, 0.0, WORKER, workers_min=2, ps_count=1, ps=WORKER)
    assert _nodes_of(Snapshot(10.0, nodes, TEAM, (job,))) == {1}
    avoiding = Job(
        1,
        "a",
        "normal",
        PENDING,
        0.0,
        WORKER,
        workers_min=2,
        ps_count=1,
        ps=WORKER,
        avoid_nodes=frozenset({1}),
    )
    assert _nodes_of(Snapshot(10.0, nodes, TEAM, (avoiding,))) == {2}


def test_the_avoided_node_is_used_when_nothing_else_fits() -> None:
    # Node 2 is too small for a worker: the job still starts, on node 1.
    nodes = (Node(1, Resources(4, 8000, 0)), Node(2, Resources(0.5, 8000, 0)))
    job = Job(1, "a", "normal", PENDING, 0.0, WORKER, workers_min=2, avoid_nodes=frozenset({1}))
    assert _nodes_of(Snapshot(10.0, nodes, TEAM, (job,))) == {1}
