"""A task's end in words: the job's message and history never say "exited with code None"."""

from __future__ import annotations

import pytest
from django.utils import timezone
from trainhub.jobs.choices import JobState, TaskRole, TaskState
from trainhub.jobs.exits import describe_exit, exit_status
from trainhub.jobs.models import Job
from trainhub.jobs.services import place_job, record_task_status

from ..factories import gang_placements, make_job
from .conftest import World


@pytest.mark.parametrize(
    ("exit_code", "words"),
    [
        (None, "ended with no exit status"),
        (0, "exited with code 0"),
        (3, "exited with code 3"),
        (128, "exited with code 128"),
        (137, "was killed by SIGKILL (exit code 137)"),
        (143, "was killed by SIGTERM (exit code 143)"),
        (128 + 99, "was killed by signal 99 (exit code 227)"),
        (-9, "was killed by SIGKILL"),
    ],
)
def test_an_exit_code_in_words(exit_code: int | None, words: str) -> None:
    assert describe_exit(exit_code) == words


def test_an_exit_status_in_parentheses() -> None:
    assert exit_status(None) == "no exit status"
    assert exit_status(137) == "exit code 137"


def _lost_then_killed(world: World) -> Job:
    """A running job whose worker is lost with no exit status (restarted outside
    max_restarts), then killed twice (restarted once, then failed)."""
    job = make_job(world.alice, max_restarts=1)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    for task in job.tasks.all():
        _report(task.pk, task.attempt, TaskState.RUNNING, None, "")
    worker = job.tasks.get(role=TaskRole.WORKER)
    _report(worker.pk, 1, TaskState.FAILED, None, "lost while the agent was down")
    _report(worker.pk, 2, TaskState.RUNNING, None, "")
    _report(worker.pk, 2, TaskState.FAILED, 137, "killed by SIGKILL")
    _report(worker.pk, 3, TaskState.RUNNING, None, "")
    _report(worker.pk, 3, TaskState.FAILED, 137, "killed by SIGKILL")
    job.refresh_from_db()
    return job


def _report(task_id: int, attempt: int, state: TaskState, code: int | None, msg: str) -> None:
    from trainhub.jobs.models import Task

    node_id = Task.objects.get(pk=task_id).node_id
    assert node_id is not None
    record_task_status(
        node_id=node_id,
        task_id=task_id,
        attempt=attempt,
        state=state,
        exit_code=code,
        message=msg,
        now=timezone.now(),
    )


def test_a_lost_task_and_a_killed_one_are_told_in_words(world: World) -> None:
    job = _lost_then_killed(world)
    assert job.state == JobState.FAILED
    assert job.events.filter(kind="restart").order_by("id")[0].reason == (
        "worker 0 ended with no exit status: lost while the agent was down; "
        "relaunching it (restart 1 of 10 for retry.on causes) — node_lost: node "
        f"{world.node.hostname} stopped answering (not the job's code); a failed job runs "
        "again with Clone"
    )
    # The agent's "killed by SIGKILL" is not said twice; one restart, not "1 restarts".
    assert job.message == (
        "worker 0 was killed by SIGKILL (exit code 137) (after 1 restart, the spec's max_restarts)"
        " — killed: the task was killed by SIGKILL from outside it; if it was near its "
        f"{job.job_spec.workers.resources.memory_mb} MiB of memory, raise "
        "workers.resources.memory_mb"
    )
    said = [job.message, *job.events.values_list("reason", flat=True)]
    assert not [text for text in said if "None" in text], said
