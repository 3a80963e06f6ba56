"""record_task_status, release_lost_nodes and settle_unstarted_tasks: what agents report
(or fail to) and what the job does about it."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from trainhub.events import JobStateChanged, NodeTasksChanged, TaskStateChanged
from trainhub.jobs.choices import DesiredState, JobState, TaskRole, TaskState
from trainhub.jobs.models import Job, Task
from trainhub.jobs.selectors import desired_tasks
from trainhub.jobs.services import (
    place_job,
    record_task_status,
    release_lost_nodes,
    settle_unstarted_tasks,
)

from ps_runtime.taskenv import EXIT_ENVIRONMENT, EXIT_PS_LOST, PS_REJOIN

from ..event_capture import Capture
from ..factories import gang_placements, make_job
from .conftest import World


def _placed(world: World, **spec: Any) -> Job:
    job = make_job(world.alice, **spec)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    return job


def _report(
    task: Task,
    state: TaskState,
    exit_code: int | None = None,
    *,
    attempt: int | None = None,
    node_id: int | None = None,
    message: str = "",
) -> None:
    assert task.node_id is not None
    record_task_status(
        node_id=task.node_id if node_id is None else node_id,
        task_id=task.pk,
        attempt=task.attempt if attempt is None else attempt,
        state=state,
        exit_code=exit_code,
        message=message,
        now=timezone.now(),
    )


def _run_all(job: Job) -> None:
    for task in job.tasks.all():
        _report(task, TaskState.RUNNING)


def _state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def test_the_job_runs_once_every_task_runs(world: World, published: Capture) -> None:
    job = _placed(world)
    coordinator, *others = job.tasks.order_by("role", "index")
    with published() as events:
        _report(coordinator, TaskState.RUNNING)
    assert _state(job) == JobState.STARTING
    assert events == [
        TaskStateChanged(
            job_id=job.pk,
            task_id=coordinator.pk,
            role=TaskRole.COORDINATOR,
            index=0,
            state=TaskState.RUNNING,
            ended=False,
        )
    ]
    for task in others:
        _report(task, TaskState.RUNNING)
    assert _state(job) == JobState.RUNNING
    assert job.tasks.filter(started_at__isnull=True).count() == 0


def test_stale_or_foreign_reports_are_ignored(world: World, published: Capture) -> None:
    job = _placed(world)
    task = job.tasks.get(role=TaskRole.WORKER)
    with published() as events:
        _report(task, TaskState.FAILED, 1, attempt=task.attempt + 1)  # a later attempt's
        _report(task, TaskState.FAILED, 1, node_id=world.node.pk + 1000)  # another node's
    assert Task.objects.values_list("state", "exit_code").get(pk=task.pk) == (
        TaskState.ASSIGNED,
        None,
    )
    assert events == []
    _report(task, TaskState.STOPPED, 0)
    _report(task, TaskState.FAILED, 1)  # already over: ignored
    assert Task.objects.values_list("state", "exit_code").get(pk=task.pk) == (
        TaskState.STOPPED,
        0,
    )


def test_coordinator_exit_0_means_the_job_succeeded(world: World, published: Capture) -> None:
    job = _placed(world)
    _run_all(job)
    coordinator = job.tasks.get(role=TaskRole.COORDINATOR)
    with published() as events:
        _report(coordinator, TaskState.SUCCEEDED, 0)
    assert _state(job) == JobState.SUCCEEDED
    assert set(job.tasks.exclude(pk=coordinator.pk).values_list("desired", flat=True)) == {
        DesiredState.STOP
    }
    ended = [e for e in events if isinstance(e, TaskStateChanged)]
    assert [(e.task_id, e.ended) for e in ended] == [(coordinator.pk, True)]
    assert JobStateChanged(job_id=job.pk, state=JobState.SUCCEEDED) in events


def test_a_failed_worker_is_relaunched_until_max_restarts(world: World, published: Capture) -> None:
    job = _placed(world, max_restarts=1)
    _run_all(job)
    worker = job.tasks.get(role=TaskRole.WORKER)
    with published() as events:
        _report(worker, TaskState.FAILED, 1, message="oom")
    worker.refresh_from_db()
    job.refresh_from_db()
    assert (worker.attempt, worker.state, worker.exit_code) == (2, TaskState.ASSIGNED, None)
    assert (job.state, job.restarts) == (JobState.RUNNING, 1)
    assert job.events.get(kind="restart").reason == (
        "worker 0 exited with code 1: oom; relaunching it (restart 1 of 1) — exit_code: it "
        "exited with code 1 without a Python traceback: read its output with `trainhub logs`"
    )
    assert NodeTasksChanged(node_ids=(world.node.pk,)) in events

    _report(worker, TaskState.FAILED, 1)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.message.startswith(
        "worker 0 exited with code 1 (after 1 restart, the spec's max_restarts) — exit_code: "
    )
    assert (job.end_cause, job.end_hint) == (
        "exit_code",
        "it exited with code 1 without a Python traceback: read its output with `trainhub logs`",
    )


def test_a_lost_parameter_server_restarts_the_whole_job(world: World) -> None:
    job = _placed(world, max_restarts=2)
    _run_all(job)
    coordinator = job.tasks.get(role=TaskRole.COORDINATOR)
    _report(coordinator, TaskState.FAILED, EXIT_PS_LOST)
    assert _state(job) == JobState.RESTARTING
    assert set(job.tasks.values_list("attempt", "state")) == {(2, TaskState.ASSIGNED)}
    _run_all(job)
    assert _state(job) == JobState.RUNNING


def _rejoins(world: World, job: Job) -> dict[int, bool]:
    """PS index -> whether the agent is told to start it as a replacement."""
    return {
        t.index: PS_REJOIN.name in t.env
        for t in desired_tasks(world.node).tasks
        if t.job_id == job.pk and t.role == TaskRole.PS
    }


def test_a_lost_ps_of_a_replicated_job_is_relaunched_alone_as_a_replacement(
    world: World,
) -> None:
    small = {"cpu": 0.5, "memory_mb": 512}
    job = _placed(
        world,
        max_restarts=4,
        parameter_servers={"replicas": 2, "replication": 1, "resources": small},
    )
    _run_all(job)
    assert _rejoins(world, job) == {0: False, 1: False}
    _report(job.tasks.get(role=TaskRole.PS, index=0), TaskState.FAILED, 137)
    assert _state(job) == JobState.RUNNING
    assert _rejoins(world, job) == {0: True, 1: False}
    assert (
        "relaunching it; it copies its shards from a live replica while the job runs on "
        "(restart 1 of 4) — killed: the task was killed by SIGKILL"
    ) in job.events.get(kind="restart").reason

    # The whole job restarting (here: its coordinator killed) starts every PS afresh.
    _run_all(job)
    _report(job.tasks.get(role=TaskRole.COORDINATOR), TaskState.FAILED, 137)
    assert _state(job) == JobState.RESTARTING
    assert _rejoins(world, job) == {0: False, 1: False}

    # A replacement that finds no replica to copy from exits 75: restart from checkpoint.
    _run_all(job)
    _report(job.tasks.get(role=TaskRole.PS, index=1), TaskState.FAILED, 137)
    assert _rejoins(world, job) == {0: False, 1: True}
    _report(job.tasks.get(role=TaskRole.PS, index=1), TaskState.FAILED, EXIT_PS_LOST)
    assert _state(job) == JobState.RESTARTING
    assert _rejoins(world, job) == {0: False, 1: False}


def test_a_coordinator_that_fails_with_no_restart_left_fails_the_job(world: World) -> None:
    job = _placed(world, max_restarts=0)
    _run_all(job)
    _report(job.tasks.get(role=TaskRole.COORDINATOR), TaskState.FAILED, 1, message="bug")
    job.refresh_from_db()
    assert (job.state, job.message, job.restarts) == (
        JobState.FAILED,
        "coordinator 0 exited with code 1: bug — exit_code: it exited with code 1 without a "
        "Python traceback: read its output with `trainhub logs`",
        0,
    )
    # The job's other tasks were asked to stop: however they end, that is why, and the
    # job keeps the cause of the failure that ended it.
    worker = job.tasks.get(role=TaskRole.WORKER)
    assert worker.desired == DesiredState.STOP
    _report(worker, TaskState.FAILED, 143)
    worker.refresh_from_db()
    job.refresh_from_db()
    assert (worker.end_cause, worker.end_hint) == ("stopped", "")
    assert job.end_cause == "exit_code"


def test_lost_nodes_end_their_tasks_and_fail_running_jobs(world: World, published: Capture) -> None:
    # Without node_lost in retry.on and with no restart left (`test_retries`: requeued).
    job = _placed(world, max_restarts=0, retry={"on": [], "backoff_seconds": 0})
    _run_all(job)
    with published() as events:
        ended = release_lost_nodes(
            lost_node_ids=[world.node.pk], lost_after_s=30, now=timezone.now()
        )
    assert ended == 3
    job.refresh_from_db()
    hint = (
        f"node {world.node.hostname} stopped answering (not the job's code); a failed job "
        "runs again with Clone"
    )
    reason = f"node {world.node.hostname} lost: no heartbeat for 30 s — node_lost: {hint}"
    assert (job.state, job.message, job.end_cause) == (JobState.FAILED, reason, "node_lost")
    assert set(job.tasks.values_list("state", flat=True)) == {TaskState.FAILED}
    assert set(job.tasks.values_list("end_cause", "end_hint")) == {("node_lost", hint)}
    assert sum(isinstance(e, TaskStateChanged) and e.ended for e in events) == 3
    # Nothing left to release.
    assert (
        release_lost_nodes(lost_node_ids=[world.node.pk], lost_after_s=30, now=timezone.now()) == 0
    )


def test_tasks_stopped_before_they_started_are_settled_by_the_heartbeat(
    world: World, published: Capture
) -> None:
    job = _placed(world)
    coordinator, ps, worker = job.tasks.order_by("role", "index")
    Task.objects.filter(pk__in=[coordinator.pk, ps.pk]).update(desired=DesiredState.STOP)
    live = {(ps.pk, ps.attempt)}  # the agent did start the PS
    with published() as events:
        settled = settle_unstarted_tasks(node_id=world.node.pk, live=live, now=timezone.now())
    assert settled == 1
    states = dict(job.tasks.values_list("pk", "state"))
    assert states == {
        coordinator.pk: TaskState.STOPPED,
        ps.pk: TaskState.ASSIGNED,
        worker.pk: TaskState.ASSIGNED,
    }
    assert [e.task_id for e in events if isinstance(e, TaskStateChanged) and e.ended] == [
        coordinator.pk
    ]
    assert settle_unstarted_tasks(node_id=world.node.pk, live=live, now=timezone.now()) == 0


def test_a_task_whose_environment_builds_shows_preparing_with_its_progress(
    world: World, published: Capture
) -> None:
    job = _placed(world)
    worker = job.tasks.get(role=TaskRole.WORKER)
    with published() as events:
        _report(worker, TaskState.PREPARING, message="building the environment: Resolved 10")
        _report(worker, TaskState.PREPARING, message="building the environment: Prepared 10")
    assert _state(job) == JobState.PREPARING
    worker.refresh_from_db()
    assert worker.state == TaskState.PREPARING
    assert worker.message == "building the environment: Prepared 10"
    progress = [e.message for e in events if isinstance(e, TaskStateChanged)]
    assert progress == [
        "building the environment: Resolved 10",
        "building the environment: Prepared 10",
    ]
    assert [e.state for e in events if isinstance(e, JobStateChanged)] == [JobState.PREPARING]
    _run_all(job)
    assert _state(job) == JobState.RUNNING
    worker.refresh_from_db()
    assert worker.message == ""  # no longer the build's progress


def test_an_environment_that_cannot_be_built_fails_the_job_without_a_restart(
    world: World,
) -> None:
    job = _placed(world, max_restarts=3)
    worker = job.tasks.get(role=TaskRole.WORKER)
    _report(worker, TaskState.PREPARING, message="building")
    reason = "the environment could not be built: requirement 'torch==9.9': no version"
    _report(worker, TaskState.FAILED, EXIT_ENVIRONMENT, message=reason)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.restarts == 0
    assert job.message == (
        f"worker 0 could not start: {reason} — environment_failed: the job's Python "
        "environment could not be built: check environment.requirements against the task's "
        "message"
    )
    # A worker failing otherwise is relaunched (a restart spent), as before.
    other = _placed(world, max_restarts=3)
    worker = other.tasks.get(role=TaskRole.WORKER)
    _run_all(other)
    _report(worker, TaskState.FAILED, 1, message="exited with code 1")
    other.refresh_from_db()
    assert other.state == JobState.RUNNING and other.restarts == 1
