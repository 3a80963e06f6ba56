"""A job's life through the scheduler and the agent gateway, against the real database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.agents.services import ProtocolError, handle_message
from trainhub.asgi import application
from trainhub.jobs.choices import DesiredState, JobState, TaskState
from trainhub.jobs.models import Job
from trainhub.scheduling.services import run_cycle
from trainhub.telemetry.chunks import stored_points
from trainhub.tenancy.choices import Role

from ..agent_sim import agent_tasks, report
from ..factories import make_job, make_node, make_team, make_user


@pytest.fixture
def setup(db: Any) -> dict[str, Any]:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, credential = make_node(cpus=4, memory_mb=8192)
    return {"alice": alice, "node": node, "credential": credential}


def test_job_runs_to_success_through_placement_and_reports(setup: dict[str, Any]) -> None:
    node = setup["node"]
    job = make_job(setup["alice"])
    assert agent_tasks(setup["credential"])["tasks"] == []

    assert run_cycle(now=timezone.now()).started == 1
    tasks = agent_tasks(setup["credential"])["tasks"]
    assert sorted((t["role"], t["index"]) for t in tasks) == [
        ("coordinator", 0),
        ("ps", 0),
        ("worker", 0),
    ]
    env = {t["role"]: t["env"] for t in tasks}
    cluster = json.loads(env["coordinator"]["TRAINHUB_CLUSTER"])
    assert cluster == {
        "ps": [env["ps"]["TRAINHUB_BIND"]],
        "worker": [env["worker"]["TRAINHUB_BIND"]],
    }
    assert env["coordinator"]["TRAINHUB_ENTRYPOINT"] == "ps_runtime.examples.movielens:train"
    assert json.loads(env["coordinator"]["TRAINHUB_ARGS"]) == {"epochs": 1}
    assert env["coordinator"]["TRAINHUB_CHECKPOINT_EVERY_SECONDS"] == "300"
    assert env["ps"]["TRAINHUB_JOB_TOKEN"] == job.runtime_token

    for task in tasks:
        report(node.pk, task, "running")
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    coordinator = next(t for t in tasks if t["role"] == "coordinator")
    good = {"step": 1, "time": timezone.now().isoformat(), "values": {"test_rmse": 0.95}}
    bad = {"step": 2, "values": {"test_rmse": float("nan")}}

    def metrics(*points: dict[str, Any]) -> None:
        message = {"type": "metrics", "id": coordinator["id"], "attempt": 1, "points": points}
        handle_message(node_id=node.pk, now=timezone.now(), message=message)

    # The protocol refuses NaN (the agent drops such values before sending): the message
    # is refused as a whole, naming the value, and nothing of it is stored.
    with pytest.raises(ProtocolError, match=r"^points\[1\]\.values\.test_rmse must be a finite"):
        metrics(good, bad)
    assert not stored_points()
    metrics(good)
    assert [(n, s, v) for _, _, n, s, v, _ in stored_points()] == [("test_rmse", 1, 0.95)]

    report(node.pk, coordinator, "succeeded", 0)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    # The PS and worker are no longer desired: the agent will stop them.
    assert agent_tasks(setup["credential"])["tasks"] == []
    assert set(job.tasks.values_list("desired", flat=True)) >= {DesiredState.STOP}
    kinds = [(e.to_state, e.actor) for e in job.events.all() if e.kind == "state"]
    assert [k[0] for k in kinds] == ["starting", "running", "succeeded"]

    client = APIClient()
    client.force_authenticate(setup["alice"])
    series = client.get(f"/api/v1/jobs/{job.pk}/metrics/").json()["series"]
    assert [p["value"] for p in series["test_rmse"]] == [0.95]


def test_task_failure_fails_the_job_with_the_reason(setup: dict[str, Any]) -> None:
    job = make_job(setup["alice"], max_restarts=0)
    run_cycle(now=timezone.now())
    tasks = agent_tasks(setup["credential"])["tasks"]
    worker = next(t for t in tasks if t["role"] == "worker")
    report(setup["node"].pk, worker, "failed", 3)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.message == (
        "worker 0 exited with code 3 — exit_code: it exited with code 3 without a Python "
        "traceback: read its output with `trainhub logs`"
    )
    # A repeated or late report changes nothing.
    report(setup["node"].pk, worker, "failed", 3)
    assert Job.objects.get(pk=job.pk).events.filter(to_state=JobState.FAILED).count() == 1


_SIGKILL_HINT = (
    "the task was killed by SIGKILL from outside it; if it was near its 512 MiB of memory, "
    "raise workers.resources.memory_mb"
)


def _running_job(setup: dict[str, Any], **spec: Any) -> tuple[Job, list[dict[str, Any]]]:
    job = make_job(setup["alice"], **spec)
    run_cycle(now=timezone.now())
    tasks = agent_tasks(setup["credential"])["tasks"]
    for task in tasks:
        report(setup["node"].pk, task, "running")
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return job, tasks


def test_lost_worker_is_relaunched_while_the_job_keeps_running(setup: dict[str, Any]) -> None:
    job, tasks = _running_job(setup, max_restarts=1)
    worker = next(t for t in tasks if t["role"] == "worker")
    report(setup["node"].pk, worker, "failed", 137)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.restarts == 1
    relaunched = next(t for t in agent_tasks(setup["credential"])["tasks"] if t["role"] == "worker")
    assert (relaunched["id"], relaunched["attempt"]) == (worker["id"], 2)
    assert relaunched["env"]["TRAINHUB_BIND"] == worker["env"]["TRAINHUB_BIND"]
    assert job.events.filter(kind="restart").get().reason == (
        "worker 0 was killed by SIGKILL (exit code 137); relaunching it (restart 1 of 1)"
        f" — killed: {_SIGKILL_HINT}"
    )
    report(setup["node"].pk, worker, "stopped")  # the old attempt's late report: ignored
    report(setup["node"].pk, relaunched, "running")
    report(setup["node"].pk, relaunched, "failed", 137)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.message == (
        "worker 0 was killed by SIGKILL (exit code 137) (after 1 restart, the spec's max_restarts)"
        f" — killed: {_SIGKILL_HINT}"
    )


def test_lost_ps_restarts_every_task_then_runs_again(setup: dict[str, Any]) -> None:
    job, tasks = _running_job(setup, max_restarts=2)
    ps = next(t for t in tasks if t["role"] == "ps")
    report(setup["node"].pk, ps, "failed", 137)
    job.refresh_from_db()
    assert job.state == JobState.RESTARTING
    again = agent_tasks(setup["credential"])["tasks"]
    assert sorted((t["role"], t["attempt"]) for t in again) == [
        ("coordinator", 2),
        ("ps", 2),
        ("worker", 2),
    ]
    coordinator = next(t for t in tasks if t["role"] == "coordinator")
    report(setup["node"].pk, coordinator, "failed", 1)  # the old coordinator dying: ignored
    for task in again:
        report(setup["node"].pk, task, "running")
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert [e.to_state for e in job.events.filter(kind="state")][-2:] == ["restarting", "running"]


def test_coordinator_exit_75_restarts_the_job_and_other_failures_do_not(
    setup: dict[str, Any],
) -> None:
    # A lost PS restarts outside max_restarts (retry.on's ps_lost); a bug does not.
    job, tasks = _running_job(setup, max_restarts=0)
    coordinator = next(t for t in tasks if t["role"] == "coordinator")
    report(setup["node"].pk, coordinator, "failed", 75)  # a PS was lost
    job.refresh_from_db()
    assert job.state == JobState.RESTARTING
    again = agent_tasks(setup["credential"])["tasks"]
    for task in again:
        report(setup["node"].pk, task, "running")
    coordinator = next(t for t in again if t["role"] == "coordinator")
    report(setup["node"].pk, coordinator, "failed", 1)  # a bug in user code: no restart
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.message.startswith("coordinator 0 exited with code 1 — exit_code: ")


def test_a_coordinator_killed_by_a_signal_restarts_the_job(setup: dict[str, Any]) -> None:
    job, tasks = _running_job(setup, max_restarts=1)
    coordinator = next(t for t in tasks if t["role"] == "coordinator")
    report(setup["node"].pk, coordinator, "failed", 137)  # SIGKILL: the OOM killer, kill -9
    job.refresh_from_db()
    assert job.state == JobState.RESTARTING
    assert job.events.filter(to_state=JobState.RESTARTING).get().reason == (
        "coordinator 0 was killed by SIGKILL (exit code 137); restarting the job from its "
        "last checkpoint (restart 1 of 1) — killed: the task was killed by SIGKILL from outside "
        "it; if it was near its 512 MiB of memory, raise coordinator.resources.memory_mb"
    )


def test_scaling_a_running_job_adds_and_removes_workers(setup: dict[str, Any]) -> None:
    from trainhub.jobs.services import scale_job

    job, _ = _running_job(setup, workers={"min": 1, "max": 3, "resources": {"cpu": 0.5}})

    def desired() -> dict[tuple[str, int], dict[str, Any]]:
        return {(t["role"], t["index"]): t for t in agent_tasks(setup["credential"])["tasks"]}

    def cluster_workers() -> list[str]:
        env = desired()[("coordinator", 0)]["env"]
        return list(json.loads(env["TRAINHUB_CLUSTER"])["worker"])

    scale_job(job=job, workers=2, actor="alice", now=timezone.now())
    run_cycle(now=timezone.now())
    grown = desired()
    assert ("worker", 1) in grown
    assert len(cluster_workers()) == 2
    report(setup["node"].pk, grown[("worker", 1)], "running")
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    scale_job(job=job, workers=1, actor="alice", now=timezone.now())
    run_cycle(now=timezone.now())
    assert ("worker", 1) not in desired()
    assert len(cluster_workers()) == 1
    report(setup["node"].pk, grown[("worker", 1)], "stopped")
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    scale_job(job=job, workers=2, actor="alice", now=timezone.now())
    run_cycle(now=timezone.now())
    again = desired()[("worker", 1)]
    assert (again["id"], again["attempt"]) == (grown[("worker", 1)]["id"], 2)
    reasons = [e.reason for e in job.events.filter(kind="rescale")]
    assert reasons == ["workers 1 -> 2", "workers 2 -> 1", "workers 1 -> 2"]


def test_cancel_stops_tasks_and_second_cancel_conflicts(setup: dict[str, Any]) -> None:
    job = make_job(setup["alice"])
    run_cycle(now=timezone.now())
    assert agent_tasks(setup["credential"])["ended_jobs"] == []
    client = APIClient()
    client.force_authenticate(setup["alice"])
    response = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    desired = agent_tasks(setup["credential"])
    # Until they report stopped, the node stops them without a coordinator's grace.
    assert desired["tasks"] == [] and desired["ended_jobs"] == [job.pk]
    for task in job.tasks.all():
        handle_message(
            node_id=setup["node"].pk,
            now=timezone.now(),
            message={"type": "task_status", "id": task.pk, "attempt": 1, "state": "stopped"},
        )
    assert set(job.tasks.values_list("state", flat=True)) == {TaskState.STOPPED}
    assert agent_tasks(setup["credential"])["ended_jobs"] == []
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 409


def test_other_teams_jobs_are_invisible(setup: dict[str, Any]) -> None:
    job = make_job(setup["alice"])
    bob = make_user("bob")
    make_team("ads", members={bob: Role.ADMIN})
    client = APIClient()
    client.force_authenticate(bob)
    assert client.get("/api/v1/jobs/").json()["results"] == []
    for suffix in ("", "metrics/", "events/", "logs/"):
        assert client.get(f"/api/v1/jobs/{job.pk}/{suffix}").status_code == 404
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 404


def test_pending_reason_when_nothing_fits(setup: dict[str, Any]) -> None:
    make_job(setup["alice"])  # 1.5 of the 4 CPUs (a larger job is refused at submission)
    run_cycle(now=timezone.now())
    job = make_job(setup["alice"], workers={"min": 2, "resources": {"cpu": 1.5}})
    run_cycle(now=timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.pending_reason == "not enough free cpu in the cluster: needs 4, 2.5 free"


@pytest.mark.django_db(transaction=True)
def test_agent_socket_authenticates_and_receives_task_notices() -> None:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, credential = make_node()

    async def scenario() -> None:
        bad = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", b"Node 1.wrong")]
        )
        connected, code = await bad.connect()
        assert not connected and code == 4401

        agent = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", f"Node {credential}".encode())]
        )
        connected, _ = await agent.connect()
        assert connected
        await agent.send_json_to({"type": "heartbeat", "usage": {"cpu_percent": 5}, "tasks": []})
        await agent.send_json_to({"type": "nonsense"})
        error = await agent.receive_json_from()
        assert error["type"] == "error" and error["message"].startswith("type must be one of")
        await agent.send_json_to({"type": "heartbeat", "usage": {"cpu_percent": float("inf")}})
        error = await agent.receive_json_from()
        assert error["message"].startswith("usage.cpu_percent must be a finite number")

        from channels.db import database_sync_to_async

        await database_sync_to_async(make_job)(alice)
        await database_sync_to_async(run_cycle)(now=timezone.now())
        assert await agent.receive_json_from(timeout=5) == {"type": "tasks_changed"}
        await agent.disconnect(timeout=10)

    async_to_sync(scenario)()
    node.refresh_from_db()
    assert node.usage == {"cpu_percent": 5}


def test_lost_node_requeues_its_running_job_with_the_reason(setup: dict[str, Any]) -> None:
    from datetime import timedelta

    job = make_job(setup["alice"])
    start = timezone.now()
    run_cycle(now=start)
    for task in agent_tasks(setup["credential"])["tasks"]:
        report(setup["node"].pk, task, "running")
    run_cycle(now=start + timedelta(seconds=10))  # still within the grace period
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    run_cycle(now=start + timedelta(seconds=60))
    job.refresh_from_db()
    # Placed again when a node fits (none here: the only one is lost).
    assert (job.state, job.end_cause, job.infra_restarts) == (JobState.PENDING, "node_lost", 1)
    requeued = job.events.get(to_state=JobState.PREEMPTED).reason
    assert requeued.startswith("node node-1 lost: no heartbeat for 30 s: stopping the job's tasks")
    assert set(job.tasks.values_list("state", flat=True)) == {TaskState.FAILED}


def test_node_secrets_never_start_with_a_dash() -> None:
    """A token pasted after `--token` must not read as an option (argparse would refuse).
    One in 64 URL-safe tokens starts with "-": 2,000 draws would show it."""
    from trainhub.nodes.secrets_util import new_secret

    assert not any(new_secret().startswith("-") for _ in range(2000))


def test_a_traceback_in_the_tasks_stderr_is_its_cause_on_the_task_and_the_job(
    setup: dict[str, Any],
) -> None:
    """The gateway reads the attempt's stderr back for the classification: the cause and
    its hint land on the task, on the job, and in the job's message."""
    job, tasks = _running_job(setup, max_restarts=0)
    worker = next(t for t in tasks if t["role"] == "worker")
    key = {"id": worker["id"], "attempt": worker["attempt"], "seq": 1}
    traceback = [
        "Traceback (most recent call last):",
        '  File "/srv/task/code/train.py", line 12, in main',
        "    import foo",
        "ModuleNotFoundError: No module named 'foo'",
    ]
    for stream, lines in (("stderr", traceback), ("stdout", ["epoch 1 done"])):
        message = {"type": "logs", **key, "stream": stream, "lines": lines}
        handle_message(node_id=setup["node"].pk, now=timezone.now(), message=message)
    report(setup["node"].pk, worker, "failed", 1)
    job.refresh_from_db()
    hint = "ModuleNotFoundError: No module named 'foo' at train.py:12 — add foo to " + (
        "environment.requirements"
    )
    task = job.tasks.get(pk=worker["id"])
    assert (task.end_cause, task.end_hint) == ("user_exception", hint)
    assert (job.state, job.end_cause, job.end_hint) == (JobState.FAILED, "user_exception", hint)
    assert job.message == f"worker 0 exited with code 1 — user_exception: {hint}"


def test_a_relaunched_attempt_is_not_blamed_for_the_last_ones_traceback(
    setup: dict[str, Any],
) -> None:
    job, tasks = _running_job(setup, max_restarts=1)
    worker = next(t for t in tasks if t["role"] == "worker")
    lines = ["Traceback (most recent call last):", "ValueError: first attempt"]
    message = {"type": "logs", "id": worker["id"], "attempt": 1, "seq": 1, "stream": "stderr"}
    handle_message(
        node_id=setup["node"].pk, now=timezone.now(), message={**message, "lines": lines}
    )
    report(setup["node"].pk, worker, "failed", 1)
    assert job.tasks.get(pk=worker["id"]).end_cause == "user_exception"
    second = {**worker, "attempt": 2}
    report(setup["node"].pk, second, "running")
    report(setup["node"].pk, second, "failed", 3)
    task = job.tasks.get(pk=worker["id"])
    assert (task.attempt, task.end_cause) == (2, "exit_code")
    assert "ValueError" not in task.end_hint


def test_an_oom_killed_status_is_out_of_memory_with_the_memory_to_raise(
    setup: dict[str, Any],
) -> None:
    job, tasks = _running_job(setup, max_restarts=0)
    worker = next(t for t in tasks if t["role"] == "worker")
    status = {"type": "task_status", "id": worker["id"], "attempt": worker["attempt"]}
    failed = {"state": "failed", "exit_code": 137, "message": "killed by SIGKILL"}
    handle_message(
        node_id=setup["node"].pk,
        now=timezone.now(),
        message={**status, **failed, "oom_killed": True},
    )
    job.refresh_from_db()
    hint = "the task used more than its 512 MiB: raise workers.resources.memory_mb"
    assert (job.state, job.end_cause, job.end_hint) == (JobState.FAILED, "out_of_memory", hint)
    assert job.message.endswith(f" — out_of_memory: {hint}")
