"""The first-fit gang policy, as a pure function."""

from __future__ import annotations

from trainhub.scheduling.policy.first_fit import (
    JobRequest,
    NodeCapacity,
    Snapshot,
    TaskRequest,
    schedule,
)


def _job(job_id: int, n: int, cpu: float = 1, mem: int = 1000, gpu: int = 0) -> JobRequest:
    return JobRequest(job_id, tuple(TaskRequest("worker", i, cpu, mem, gpu) for i in range(n)))


def test_gang_is_all_or_nothing_and_later_jobs_can_still_fit() -> None:
    nodes = (NodeCapacity(1, 2, 4000), NodeCapacity(2, 1, 4000))
    decisions = schedule(Snapshot(nodes, (_job(10, 4), _job(11, 3))))
    assert 10 not in decisions.starts
    assert "not enough free CPU: needs 4, 3 free" == decisions.pending_reasons[10]
    assert [p.node_id for p in decisions.starts[11]] == [1, 1, 2]


def test_cpu_tasks_keep_off_gpu_nodes_while_cpu_nodes_fit() -> None:
    nodes = (NodeCapacity(1, 8, 64000, [0, 1], has_gpus=True), NodeCapacity(2, 2, 8000))
    decisions = schedule(Snapshot(nodes, (_job(1, 2), _job(2, 1, gpu=2))))
    assert {p.node_id for p in decisions.starts[1]} == {2}
    assert decisions.starts[2][0].gpu_indices == (0, 1)


def test_every_unplaced_job_has_a_reason() -> None:
    decisions = schedule(Snapshot((), (_job(1, 1),)))
    assert decisions.pending_reasons == {1: "no nodes are available"}
    decisions = schedule(Snapshot((NodeCapacity(1, 4, 100),), (_job(2, 1),)))
    assert decisions.pending_reasons[2].startswith("not enough free memory")
