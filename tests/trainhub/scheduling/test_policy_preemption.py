"""Who gives way, and when: victim order, the minimum run on borrowed quota, shrink before
preempt, no preemption for a job that cannot fit, and the penalty on borrowing again."""

from __future__ import annotations

from dataclasses import replace

from trainhub.scheduling.policy import (
    PENDING,
    RUNNING,
    WORKER,
    Job,
    Node,
    PolicyConfig,
    Resources,
    Snapshot,
    Task,
    Team,
    schedule,
)

GPU = Resources(2, 8000, 1)
NOW = 10_000.0


def _running(
    job_id: int,
    team: str,
    gpus: int,
    *,
    node: int = 1,
    borrowed: bool = True,
    priority: str = "normal",
    ran: float = 1_000.0,
    checkpoint_every: float = 300.0,
    workers_max: int | None = None,
    workers_min: int | None = None,
) -> Job:
    tasks = tuple(
        Task(WORKER, i, node, GPU, borrowed=borrowed and i >= (workers_min or 0))
        for i in range(gpus)
    )
    return Job(
        job_id,
        team,
        priority,
        RUNNING,
        0.0,
        GPU,
        workers_min=workers_min or gpus,
        workers_max=workers_max or gpus,
        tasks=tasks,
        started_at=NOW - ran,
        last_rescale_time=NOW - ran,
        checkpoint_every_seconds=checkpoint_every,
        freeze_seconds=60.0,
    )


def _cluster(*jobs: Job, b_quota: int = 0) -> Snapshot:
    """One 8-GPU node; team a owns all of it, team b (quota `b_quota`) borrows."""
    nodes = (Node(1, Resources(16, 64000, 8)),)
    teams = (
        Team("a", Resources(16 - 2 * b_quota, 64000 - 8000 * b_quota, 8 - b_quota)),
        Team("b", Resources(2 * b_quota, 8000 * b_quota, b_quota)),
    )
    return Snapshot(NOW, nodes, teams, jobs)


def _owner_needs(gpus: int, waited: float = 0.0) -> Job:
    return Job(99, "a", "normal", PENDING, NOW - waited, GPU, workers_min=gpus)


def _preempted(snap: Snapshot) -> list[int]:
    return [p.job_id for p in schedule(snap).preemptions]


def test_lower_priority_gives_way_first() -> None:
    snap = _cluster(
        _running(1, "b", 4, priority="normal"),
        _running(2, "b", 4, priority="experiment"),
        _owner_needs(4),
    )
    assert _preempted(snap) == [2]


def test_an_experiments_trials_give_borrowed_capacity_back_before_ordinary_jobs() -> None:
    # The trial would lose more work (290 s against 100 s); it goes first all the same.
    trial = replace(_running(2, "b", 4, ran=890.0), reclaim_first=True)
    snap = _cluster(_running(1, "b", 4, priority="normal", ran=1_000.0), trial, _owner_needs(4))
    assert _preempted(snap) == [2]
    # Without the mark, the job that loses least work gives way instead.
    snap = _cluster(
        _running(1, "b", 4, priority="normal", ran=1_000.0),
        replace(trial, reclaim_first=False),
        _owner_needs(4),
    )
    assert _preempted(snap) == [1]


def test_at_equal_priority_the_job_that_loses_least_work_gives_way() -> None:
    # Job 1 ran longer but checkpointed 100 s ago; job 2 last checkpointed 290 s ago.
    snap = _cluster(
        _running(1, "b", 4, ran=1_000.0), _running(2, "b", 4, ran=890.0), _owner_needs(4)
    )
    assert _preempted(snap) == [1]
    # Same work at risk: the shorter run gives way.
    snap = _cluster(
        _running(1, "b", 4, ran=1_000.0), _running(2, "b", 4, ran=700.0), _owner_needs(4)
    )
    assert _preempted(snap) == [2]


def test_young_borrowed_jobs_give_way_after_older_ones_but_to_the_owner_still() -> None:
    young = _running(1, "b", 4, priority="experiment", ran=100.0)
    old = _running(2, "b", 4, priority="normal", ran=700.0)
    assert _preempted(_cluster(young, old, _owner_needs(4))) == [2]
    # Only young borrowers left: the owner's need still takes one (grace, then it starts).
    both_young = _running(2, "b", 4, ran=300.0)
    d = schedule(_cluster(young, both_young, _owner_needs(4)))
    assert len(d.preemptions) == 1 and d.preemptions[0].grace_seconds == 60.0
    assert [r.job_id for r in d.reservations] == [99]


def test_young_borrowed_jobs_are_not_evicted_for_fair_share() -> None:
    # Team c (no quota) waits for a GPU while b's CPU-only borrower sits on the GPU node:
    # eviction for fair share leaves it alone before its minimum run.
    nodes = (Node(1, Resources(4, 32000, 2)),)
    teams = (Team("b", Resources()), Team("c", Resources()))
    cpu_job = Job(
        1, "b", "normal", RUNNING, 0.0, Resources(4, 8000, 0),
        tasks=(Task(WORKER, 0, 1, Resources(4, 8000, 0), borrowed=True),),
        started_at=NOW - 100.0,
    )  # fmt: skip
    gpu_job = Job(2, "c", "normal", PENDING, NOW, Resources(2, 8000, 1))
    d = schedule(Snapshot(NOW, nodes, teams, (cpu_job, gpu_job)))
    assert d.preemptions == [] and 2 in d.pending_reasons
    old = Snapshot(NOW, nodes, teams, (replace(cpu_job, started_at=0.0), gpu_job))
    # Past the minimum run the same job does give way to the fairer team.
    assert [p.job_id for p in schedule(old).preemptions] == [1]


def test_elastic_jobs_shrink_before_anyone_is_preempted() -> None:
    # b's elastic job runs 6 workers (2 on its own quota, 4 borrowed); b's fixed job 2.
    elastic = _running(1, "b", 6, workers_min=2, workers_max=6, ran=5_000.0, priority="experiment")
    fixed = _running(2, "b", 2, borrowed=False, ran=5_000.0, priority="experiment")
    d = schedule(_cluster(elastic, fixed, _owner_needs(4), b_quota=4))
    assert d.preemptions == []
    assert sorted(r.index for r in d.remove_workers) == [2, 3, 4, 5]


def test_a_job_shrunk_and_still_in_the_way_is_only_preempted() -> None:
    # Shrinking b's job to its minimum frees 6 GPUs; the owner needs all 8.
    elastic = _running(1, "b", 8, workers_min=2, workers_max=8, ran=5_000.0)
    d = schedule(_cluster(elastic, _owner_needs(8)))
    assert [p.job_id for p in d.preemptions] == [1]
    assert d.remove_workers == []  # the preemption stops those workers too
    assert [r.job_id for r in d.reservations] == [99]


def test_one_victim_that_alone_makes_room_goes_before_several() -> None:
    # In victim order the two small jobs come first (less work at risk), and both would
    # have to go; the large one alone frees what the owner needs.
    small = [_running(i, "b", 2, node=1, ran=700.0) for i in (1, 2)]
    large = _running(3, "b", 4, ran=5_000.0)
    d = schedule(_cluster(*small, large, _owner_needs(4)))
    assert [p.job_id for p in d.preemptions] == [3]
    assert [r.job_id for r in d.reservations] == [99]


def test_nobody_is_preempted_for_a_job_that_could_never_fit() -> None:
    big_task = Job(99, "a", "normal", PENDING, NOW, Resources(2, 8000, 9))  # > any node
    too_many = Job(98, "a", "normal", PENDING, NOW, GPU, workers_min=9)  # > the cluster
    for job in (big_task, too_many):
        d = schedule(_cluster(_running(1, "b", 8, ran=5_000.0), job))
        assert d.preemptions == [] and d.remove_workers == [] and d.reservations == []
        assert job.id in d.pending_reasons


def test_a_job_preempted_repeatedly_no_longer_borrows() -> None:
    def team_b_job(preemptions: int) -> Job:
        return Job(5, "b", "normal", PENDING, NOW, GPU, workers_min=2, preemptions=preemptions)

    # Team b (2 GPUs of quota) already uses them: its next job would borrow a's idle GPUs.
    held = _running(1, "b", 2, borrowed=False)
    d = schedule(_cluster(held, team_b_job(2), b_quota=2))
    assert [s.job_id for s in d.starts] == [5] and all(t.borrowed for t in d.starts[0].tasks)
    d = schedule(_cluster(held, team_b_job(3), b_quota=2))
    assert d.starts == []
    assert "preempted 3 times: it borrows no more" in d.pending_reasons[5]
    # It still runs on its own team's quota.
    d = schedule(_cluster(team_b_job(3), b_quota=2))
    assert [s.job_id for s in d.starts] == [5] and not any(t.borrowed for t in d.starts[0].tasks)
    # The limit is a setting.
    lenient = PolicyConfig(borrow_preemption_limit=4)
    snap = _cluster(held, team_b_job(3), b_quota=2)
    d = schedule(Snapshot(snap.now, snap.nodes, snap.teams, snap.jobs, config=lenient))
    assert [s.job_id for s in d.starts] == [5]


def test_work_at_risk_counts_from_the_last_checkpoint() -> None:
    job = _running(1, "b", 1, ran=1_000.0, checkpoint_every=300.0)
    assert job.work_at_risk(NOW) == 100.0
    assert job.work_at_risk(NOW - 1_000.0) == 0.0
    assert replace(job, last_checkpoint_at=NOW - 42.0).work_at_risk(NOW) == 42.0
    assert replace(job, started_at=None).work_at_risk(NOW) == 0.0
