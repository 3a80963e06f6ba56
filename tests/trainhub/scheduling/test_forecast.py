"""The forecast behind a dry run's estimated start: the live policy run forward as jobs end."""

from __future__ import annotations

from dataclasses import replace

from trainhub.scheduling.forecast import estimate_start
from trainhub.scheduling.policy import PENDING, Job, Node, Resources, Snapshot, Team, schedule

from .driver import apply

CPU = Resources(1, 1000, 0)


def _cluster(*pending: Job) -> Snapshot:
    """One 4-CPU node held whole by job 1 (started at 0); `pending` wait behind it."""
    snap = Snapshot(
        0.0,
        (Node(1, Resources(4, 4000, 0)),),
        (Team("a", Resources(4, 4000, 0)),),
        (Job(1, "a", "normal", PENDING, 0.0, CPU, workers_min=4),),
    )
    snap = apply(snap, schedule(snap), 0.0)
    return replace(snap, now=10.0, jobs=(*snap.jobs, *pending))


def _job(job_id: int, cpus: int, submitted: float) -> Job:
    return Job(job_id, "a", "normal", PENDING, submitted, CPU, workers_min=cpus)


def test_a_job_starts_when_the_running_one_is_expected_to_end() -> None:
    snap = _cluster(_job(2, 2, 5.0), _job(3, 2, 6.0))
    assert schedule(snap).starts == []  # the node is full now
    at = estimate_start(snap, 3, ends={1: 100.0}, runtime=lambda job: 50.0, policy_name="cfs")
    assert at == 100.0  # job 2 and job 3 both fit once job 1 is gone


def test_a_job_waits_for_those_started_ahead_of_it() -> None:
    # Job 2 takes the whole node at 100 and runs 30 s; job 3 starts when it ends.
    snap = _cluster(_job(2, 4, 5.0), _job(3, 2, 6.0))
    runtimes = {2: 30.0, 3: 5.0}
    at = estimate_start(
        snap, 3, ends={1: 100.0}, runtime=lambda job: runtimes[job.id], policy_name="cfs"
    )
    assert at == 130.0


def test_no_estimate_without_known_runtimes() -> None:
    snap = _cluster(_job(2, 4, 5.0), _job(3, 2, 6.0))
    assert estimate_start(snap, 3, ends={}, runtime=lambda job: 50.0, policy_name="cfs") is None
    # Job 2 starts at 100 but nobody knows when it ends: job 3's start stays unknown.
    assert (
        estimate_start(snap, 3, ends={1: 100.0}, runtime=lambda job: None, policy_name="cfs")
        is None
    )
