"""The platform's scheduling cycle on the real database: the fair-share policy's decisions
carried out through the job services and the agent gateway."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.agents.services import handle_message
from trainhub.audit.models import AuditEntry
from trainhub.jobs.choices import DesiredState, JobState, TaskState
from trainhub.jobs.models import Job
from trainhub.jobs.services import cancel_job
from trainhub.nodes.models import Node
from trainhub.nodes.services import set_node_owner
from trainhub.scheduling.models import CycleRecord, Reservation, VruntimeAccrual
from trainhub.scheduling.services import run_cycle
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Team

from ..agent_sim import agent_tasks, report
from ..factories import make_job, make_node, make_team, make_user

SMALL = {"cpu": 1, "memory_mb": 512}


@pytest.fixture
def cluster(db: Any) -> dict[str, Any]:
    """One 4-CPU node; team `owner` owns all of it, team `lab` owns nothing (it borrows)."""
    alice, bob = make_user("alice"), make_user("bob")
    make_team("owner", members={alice: Role.MEMBER}, cpu=4, memory_mb=16384)
    make_team("lab", members={bob: Role.MEMBER}, cpu=0, memory_mb=0)
    node, credential = make_node(cpus=4, memory_mb=16384)
    return {"alice": alice, "bob": bob, "node": node, "credential": credential}


def _job(user: Any, team: str, **spec: Any) -> Job:
    fields: dict[str, Any] = {
        "parameter_servers": {"replicas": 1, "resources": SMALL},
        "workers": {"min": 1, "max": 1, "resources": SMALL},
        "coordinator": {"resources": SMALL},
        **spec,
    }
    return make_job(user, team=team, **fields)


def _desired(c: dict[str, Any], job: Job) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        (t["role"], t["index"]): t
        for t in agent_tasks(c["credential"])["tasks"]
        if t["job_id"] == job.pk
    }


def _run_all(c: dict[str, Any], job: Job) -> None:
    for task in _desired(c, job).values():
        report(c["node"].pk, task, "running")


def _heartbeat(c: dict[str, Any], at: Any) -> None:
    """The node's agent was heard from at `at` (cycles below run on a simulated clock)."""
    Node.objects.filter(pk=c["node"].pk).update(last_seen=at)


def _state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def test_borrowed_job_is_preempted_checkpoints_requeues_and_resumes(
    cluster: dict[str, Any],
) -> None:
    c = cluster
    borrower = _job(c["bob"], "lab", priority="experiment")
    run_cycle(now=timezone.now())
    _run_all(c, borrower)
    assert _state(borrower) == JobState.RUNNING
    assert set(borrower.tasks.values_list("borrowed", flat=True)) == {True}

    owner_job = _job(c["alice"], "owner")
    run_cycle(now=timezone.now())
    # The owner's job fits its nominal quota, which the borrower holds: reclaimed.
    assert _state(borrower) == JobState.PREEMPTED
    owner_job.refresh_from_db()
    assert owner_job.state == JobState.PENDING
    assert owner_job.pending_reason.startswith("capacity reclaimed for it")
    assert Reservation.objects.filter(job=owner_job).exists()
    # Only the coordinator is stopped; the PS and worker serve while it checkpoints.
    desired = _desired(c, borrower)
    assert sorted(desired) == [("ps", 0), ("worker", 0)]
    coordinator = borrower.tasks.get(role="coordinator")
    assert coordinator.desired == DesiredState.STOP

    # Another cycle while the borrower is stopping: nobody else takes the reserved room.
    intruder = _job(c["bob"], "lab", name="intruder")
    run_cycle(now=timezone.now())
    assert _state(intruder) == JobState.PENDING
    assert _state(owner_job) == JobState.PENDING
    cancel_job(job=intruder, actor="bob", now=timezone.now())

    report(c["node"].pk, {"id": coordinator.pk, "attempt": 1}, "stopped", 0)
    assert _desired(c, borrower) == {}  # now the PS and worker are stopped too
    for task in borrower.tasks.exclude(role="coordinator"):
        report(c["node"].pk, {"id": task.pk, "attempt": 1}, "stopped", 143)
    assert _state(borrower) == JobState.PENDING
    assert borrower.pending_reason == "requeued after a preemption"

    run_cycle(now=timezone.now())
    assert _state(owner_job) == JobState.STARTING
    assert not Reservation.objects.exists()
    assert set(owner_job.tasks.values_list("borrowed", flat=True)) == {False}
    assert _state(borrower) == JobState.PENDING
    assert "no idle quota to borrow" in borrower.pending_reason

    # The owner's job finishes; the borrower starts again: new attempts of its tasks.
    _run_all(c, owner_job)
    owner_coordinator = _desired(c, owner_job)[("coordinator", 0)]
    report(c["node"].pk, owner_coordinator, "succeeded", 0)
    assert _state(owner_job) == JobState.SUCCEEDED
    for task in owner_job.tasks.exclude(role="coordinator"):
        report(c["node"].pk, {"id": task.pk, "attempt": 1}, "stopped", 143)
    run_cycle(now=timezone.now())
    assert _state(borrower) == JobState.STARTING
    assert {t["attempt"] for t in _desired(c, borrower).values()} == {2}
    events = [(e.kind, e.to_state) for e in borrower.events.all()]
    assert events == [
        ("submitted", "pending"),
        ("state", "starting"),
        ("state", "running"),
        ("state", "preempted"),
        ("checkpoint", ""),
        ("stop", ""),
        ("state", "pending"),
        ("state", "starting"),
    ]
    reasons = {e.kind: e.reason for e in borrower.events.all()}
    assert reasons["checkpoint"] == "the coordinator saved a checkpoint and stopped"


def test_preempted_job_events_name_the_reclaim_the_grace_and_the_work_at_risk(
    cluster: dict[str, Any],
) -> None:
    c = cluster
    borrower = _job(c["bob"], "lab", checkpoint_every_seconds=600)
    started = timezone.now()
    run_cycle(now=started)
    _run_all(c, borrower)
    owner_job = _job(c["alice"], "owner")
    _heartbeat(c, started + timedelta(seconds=1450))
    run_cycle(now=started + timedelta(seconds=1450))  # 2 checkpoints, then 250 s of work
    event = borrower.events.get(to_state=JobState.PREEMPTED)
    assert event.reason == (
        f"making room for job {owner_job.pk} of team owner; asking its coordinator to save a "
        "checkpoint and stop (grace 60 s); without one it loses about 250 s of work since its "
        "last checkpoint (it checkpoints every 600 s)"
    )
    assert borrower.events.get(to_state=JobState.STARTING).reason == (
        f"placed on node {c['node'].pk} (on quota borrowed from other teams)"
    )


def test_a_coordinator_that_never_stops_is_overdue_and_the_job_still_requeues(
    cluster: dict[str, Any],
) -> None:
    c = cluster
    borrower = _job(c["bob"], "lab")
    start = timezone.now()
    run_cycle(now=start)
    _run_all(c, borrower)
    _job(c["alice"], "owner")
    run_cycle(now=start)
    assert _state(borrower) == JobState.PREEMPTED
    _heartbeat(c, start + timedelta(seconds=80))  # the node is fine; its coordinator hangs
    run_cycle(now=start + timedelta(seconds=30))  # inside the grace: PS and worker serve
    assert sorted(_desired(c, borrower)) == [("ps", 0), ("worker", 0)]
    run_cycle(now=start + timedelta(seconds=80))  # 60 s grace + slack passed
    assert _desired(c, borrower) == {}
    assert borrower.events.filter(kind="stop").count() == 1


def test_production_jobs_are_never_preempted(cluster: dict[str, Any]) -> None:
    c = cluster
    # Quotas add up to more than the node: the owner's job fits its nominal quota but
    # only if the production job made way, which it never does.
    make_team("prod", members={c["bob"]: Role.MEMBER}, cpu=3, memory_mb=8192)
    prod = _job(c["bob"], "prod", priority="production")
    run_cycle(now=timezone.now())
    _run_all(c, prod)
    assert _state(prod) == JobState.RUNNING
    assert set(prod.tasks.values_list("borrowed", flat=True)) == {False}
    big = _job(c["alice"], "owner", workers={"min": 2, "max": 2, "resources": SMALL})
    run_cycle(now=timezone.now())
    assert _state(prod) == JobState.RUNNING
    assert _state(big) == JobState.PENDING


def test_elastic_job_grows_into_idle_capacity_after_its_freeze_window(
    cluster: dict[str, Any],
) -> None:
    c = cluster
    job = _job(
        c["alice"],
        "owner",
        workers={"min": 1, "max": 3, "resources": {"cpu": 0.5, "memory_mb": 512}},
        freeze_seconds=60,
    )
    start = timezone.now()
    run_cycle(now=start)
    _run_all(c, job)
    _heartbeat(c, start + timedelta(seconds=61))
    run_cycle(now=start + timedelta(seconds=30))
    assert len([k for k in _desired(c, job) if k[0] == "worker"]) == 1  # frozen
    run_cycle(now=start + timedelta(seconds=61))
    workers = [k for k in _desired(c, job) if k[0] == "worker"]
    assert len(workers) == 3
    assert [e.reason for e in job.events.filter(kind="rescale")] == [
        "workers 1 -> 3 (growing into idle capacity)"
    ]


def test_observe_only_decides_and_changes_nothing(cluster: dict[str, Any]) -> None:
    c = cluster
    job = _job(c["alice"], "owner")
    result = run_cycle(now=timezone.now(), observe_only=True)
    assert result.observe_only and result.started == 0
    assert result.lines == (
        f"start job {job.pk}: coordinator 0 on node {c['node'].pk}, "
        f"ps 0 on node {c['node'].pk}, worker 0 on node {c['node'].pk}",
    )
    assert _state(job) == JobState.PENDING
    assert job.tasks.count() == 0
    assert CycleRecord.objects.get().summary["starts"] == 1
    assert run_cycle(now=timezone.now()).started == 1


def test_pending_reason_is_in_the_api(cluster: dict[str, Any]) -> None:
    c = cluster
    _job(c["alice"], "owner")  # 3 of the 4 CPUs: 1 is left to lend
    job = _job(c["bob"], "lab", workers={"min": 2, "max": 2, "resources": SMALL})
    run_cycle(now=timezone.now())
    client = APIClient()
    client.force_authenticate(c["bob"])
    body = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["state"] == "pending"
    assert body["pending_reason"] == (
        "team quota exhausted: cpu 0/0, memory_mb 0/0; no idle quota to borrow (cpu 1 lendable)"
    )


def test_virtual_runtime_accrues_for_running_jobs(cluster: dict[str, Any]) -> None:
    c = cluster
    job = _job(c["alice"], "owner")
    start = timezone.now()
    run_cycle(now=start)
    run_cycle(now=start + timedelta(seconds=10))
    job.refresh_from_db()
    # 3 of 4 CPUs for 10 s at normal priority: 0.75 x 10, kept apart from the job's row.
    assert job.vruntime == 0
    assert VruntimeAccrual.objects.get(job=job).vruntime == pytest.approx(7.5)


def test_tasks_of_a_cancelled_job_hold_their_node_until_they_stop(
    cluster: dict[str, Any],
) -> None:
    c = cluster
    first = _job(c["alice"], "owner", workers={"min": 2, "max": 2, "resources": SMALL})
    run_cycle(now=timezone.now())
    cancel_job(job=first, actor="alice", now=timezone.now())
    second = _job(c["alice"], "owner", name="second")
    run_cycle(now=timezone.now())
    assert _state(second) == JobState.PENDING
    for task in first.tasks.all():
        report(c["node"].pk, {"id": task.pk, "attempt": task.attempt}, "stopped", 143)
    assert set(first.tasks.values_list("state", flat=True)) == {TaskState.STOPPED}
    run_cycle(now=timezone.now())
    assert _state(second) == JobState.STARTING


def test_a_job_preempted_before_its_tasks_started_is_requeued_on_the_next_heartbeat(
    cluster: dict[str, Any],
) -> None:
    c = cluster
    borrower = _job(c["bob"], "lab")
    run_cycle(now=timezone.now())
    assert _state(borrower) == JobState.STARTING  # the agent has not started anything yet
    _job(c["alice"], "owner")
    run_cycle(now=timezone.now())
    assert _state(borrower) == JobState.PREEMPTED
    handle_message(
        node_id=c["node"].pk,
        now=timezone.now(),
        message={"type": "heartbeat", "usage": {}, "tasks": []},
    )
    assert _state(borrower) == JobState.PENDING
    assert set(borrower.tasks.values_list("state", flat=True)) == {TaskState.STOPPED}


def test_schedule_command_prints_what_a_cycle_would_do(cluster: dict[str, Any]) -> None:
    c = cluster
    job = _job(c["alice"], "owner")
    waiting = _job(c["bob"], "lab", workers={"min": 2, "max": 2, "resources": SMALL})
    out = io.StringIO()
    call_command("schedule", "--observe", "--policy", "fifo", stdout=out)
    node = c["node"].pk
    start, wait = out.getvalue().splitlines()
    assert start == (
        f"would start job {job.pk}: coordinator 0 on node {node}, ps 0 on node {node}, "
        f"worker 0 on node {node}"
    )
    assert wait.startswith(f"job {waiting.pk} waits: ")
    assert _state(job) == JobState.PENDING
    call_command("schedule", stdout=io.StringIO())
    assert _state(job) == JobState.STARTING


def test_a_teams_jobs_prefer_the_nodes_it_owns(cluster: dict[str, Any]) -> None:
    c = cluster
    owned, _ = make_node("node-2", cpus=4, memory_mb=16384)
    set_node_owner(node=owned, owner=Team.objects.get(slug="lab"), actor=None)
    assert AuditEntry.objects.filter(action="node.set_owner").count() == 1
    lab_job = _job(c["bob"], "lab")
    owner_job = _job(c["alice"], "owner")
    run_cycle(now=timezone.now())
    assert set(lab_job.tasks.values_list("node_id", flat=True)) == {owned.pk}
    assert set(owner_job.tasks.values_list("node_id", flat=True)) == {c["node"].pk}
    client = APIClient()
    client.force_authenticate(c["bob"])
    assert client.get(f"/api/v1/nodes/{owned.pk}/").json()["owner"] == "lab"
