"""Retries that fit the cause (`jobs.retries`, `jobs.services.restarts`): which budget a
restart spends, the same Python error twice failing the job, the backoff, a lost node's
job placed again elsewhere, and a preemption counted as the spec says."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from trainhub.events import NodeTasksChanged, RestartsWaiting
from trainhub.jobs.causes import EndCause
from trainhub.jobs.choices import DesiredState, JobState, TaskRole, TaskState
from trainhub.jobs.jobspec import RetrySpec
from trainhub.jobs.models import Job, Task
from trainhub.jobs.retries import Budget, Spent, backoff, decide
from trainhub.jobs.selectors import desired_tasks
from trainhub.jobs.services import (
    place_job,
    preempt_job,
    record_task_status,
    release_due_restarts,
    release_lost_nodes,
    restart_from_checkpoint,
)
from trainhub.jobs.spec import parse_job_spec

from ..event_capture import Capture
from ..factories import gang_placements, make_job, spec
from .conftest import World

RETRY = RetrySpec()
EXCEPTION = EndCause("user_exception", "", "ValueError at train.py:12")


def _traceback(line: int, error: str = "ValueError: bad learning rate") -> list[str]:
    """What `python train.py` printed when it raised at `line` of train.py."""
    return [
        "Traceback (most recent call last):",
        '  File "/var/lib/trainhub/tasks/7/code/train.py", line 30, in <module>',
        "    main()",
        f'  File "/var/lib/trainhub/tasks/7/code/train.py", line {line}, in main',
        "    check(lr)",
        error,
    ]


# -- the decision (pure) ------------------------------------------------------------


def test_causes_in_retry_on_spend_the_infra_budget_not_max_restarts() -> None:
    decision = decide(EndCause("node_lost", ""), RETRY, 0, Spent(restarts=0))
    assert (decision.budget, decision.restart) == (Budget.INFRA, True)
    spent = Spent(infra_restarts=RETRY.max)
    assert not decide(EndCause("transient_network", ""), RETRY, 3, spent).restart


def test_a_cause_left_out_of_retry_on_spends_max_restarts() -> None:
    only_network = RetrySpec(on=("transient_network",))
    decision = decide(EndCause("node_lost", ""), only_network, 3, Spent(restarts=2))
    assert decision.budget == Budget.USER
    assert not decide(EndCause("node_lost", ""), only_network, 3, Spent(restarts=3)).restart


def test_the_same_error_twice_in_a_row_is_not_restarted_again() -> None:
    assert decide(EXCEPTION, RETRY, 5, Spent()).budget == Budget.USER
    again = decide(EXCEPTION, RETRY, 5, Spent(restarts=1, last_error=EXCEPTION.signature))
    assert not again.restart
    assert "the same error as the failure before (ValueError at train.py:12)" in again.why
    other = EndCause("user_exception", "", "KeyError at train.py:40")
    assert decide(other, RETRY, 5, Spent(restarts=1, last_error=EXCEPTION.signature)).restart


@pytest.mark.parametrize("cause", ["environment_failed", "stopped", "succeeded"])
def test_no_restart_helps_some_causes(cause: str) -> None:
    assert not decide(EndCause(cause, ""), RetrySpec(on=("node_lost",)), 9, Spent()).restart


def test_restarts_back_off_doubling_up_to_the_ceiling() -> None:
    policy = RetrySpec(backoff_seconds=10, max_backoff_seconds=35)
    assert [backoff(policy, n) for n in range(4)] == [10, 20, 35, 35]
    assert backoff(RetrySpec(backoff_seconds=0), 5) == 0
    assert decide(EXCEPTION, policy, 5, Spent(restarts=1)).delay_s == 20


def test_the_retry_section_is_checked_field_by_field(world: World) -> None:
    from rest_framework.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        parse_job_spec(spec(retry={"on": ["gremlins"]}), user=world.alice)
    detail: Any = raised.value.detail
    assert "on" in detail["retry"]
    with pytest.raises(ValidationError) as raised:
        parse_job_spec(
            spec(retry={"backoff_seconds": 60, "max_backoff_seconds": 5}), user=world.alice
        )
    detail = raised.value.detail
    assert "max_backoff_seconds" in detail["retry"]
    parsed = parse_job_spec(spec(retry={"on": ["stalled", "stalled"], "max": 2}), user=world.alice)
    assert (parsed.retry.on, parsed.retry.max) == (("stalled",), 2)
    assert parse_job_spec(spec(), user=world.alice).retry.on == (
        "node_lost",
        "preempted",
        "transient_network",
        "ps_lost",
        "stalled",
    )


# -- the services ---------------------------------------------------------------------


def _placed(world: World, **overrides: Any) -> Job:
    job = make_job(world.alice, **overrides)
    place_job(job=job, placements=gang_placements(job, world.node), now=timezone.now())
    for task in job.tasks.all():
        _report(task, TaskState.RUNNING)
    return job


def _report(
    task: Task, state: TaskState, exit_code: int | None = None, stderr: list[str] | None = None
) -> None:
    task.refresh_from_db()
    assert task.node_id is not None
    record_task_status(
        node_id=task.node_id,
        task_id=task.pk,
        attempt=task.attempt,
        state=state,
        exit_code=exit_code,
        message="",
        now=timezone.now(),
        stderr=stderr or [],
    )


def _restart_all(job: Job) -> None:
    for task in job.tasks.filter(desired=DesiredState.RUN):
        _report(task, TaskState.RUNNING)


def test_code_that_raises_at_start_fails_after_two_attempts(world: World) -> None:
    job = _placed(world, max_restarts=5)
    coordinator = job.tasks.get(role=TaskRole.COORDINATOR)
    _report(coordinator, TaskState.FAILED, 1, _traceback(12))
    job.refresh_from_db()
    assert (job.state, job.restarts, job.last_error) == (
        JobState.RESTARTING,
        1,
        "ValueError at train.py:12",
    )
    _restart_all(job)
    _report(coordinator, TaskState.FAILED, 1, _traceback(12))
    job.refresh_from_db()
    assert (job.state, job.restarts, job.end_cause) == (JobState.FAILED, 1, "user_exception")
    assert "the same error as the failure before (ValueError at train.py:12)" in job.message


def test_a_different_error_the_second_time_restarts_again(world: World) -> None:
    job = _placed(world, max_restarts=5)
    coordinator = job.tasks.get(role=TaskRole.COORDINATOR)
    _report(coordinator, TaskState.FAILED, 1, _traceback(12))
    _restart_all(job)
    _report(coordinator, TaskState.FAILED, 1, _traceback(14))
    job.refresh_from_db()
    assert (job.state, job.restarts) == (JobState.RESTARTING, 2)


def test_a_restart_waits_out_its_backoff_before_the_agent_sees_it(
    world: World, published: Capture
) -> None:
    job = _placed(world, retry={"backoff_seconds": 30})
    worker = job.tasks.get(role=TaskRole.WORKER)
    with published() as events:
        _report(worker, TaskState.FAILED, 137)
    worker.refresh_from_db()
    assert (worker.attempt, worker.state) == (2, TaskState.ASSIGNED)
    assert worker.not_before is not None
    assert [e.delay_s for e in events if isinstance(e, RestartsWaiting)] == [30]
    assert "relaunching it in 30 s" in job.events.get(kind="restart").reason
    assert worker.pk not in {t.id for t in desired_tasks(world.node).tasks}
    assert release_due_restarts(timezone.now()) == 0  # not yet
    with published() as events:
        assert release_due_restarts(timezone.now() + timedelta(seconds=31)) == 1
    assert NodeTasksChanged(node_ids=(world.node.pk,)) in events
    assert worker.pk in {t.id for t in desired_tasks(world.node).tasks}


def test_a_lost_node_requeues_the_job_without_spending_max_restarts(
    world: World, published: Capture
) -> None:
    job = _placed(world, max_restarts=0)
    release_lost_nodes(lost_node_ids=[world.node.pk], lost_after_s=30, now=timezone.now())
    job.refresh_from_db()
    assert (job.state, job.restarts, job.infra_restarts) == (JobState.PENDING, 0, 1)
    assert job.end_cause == "node_lost"
    assert job.events.filter(to_state=JobState.PREEMPTED, reason__contains="on other nodes first")


def test_a_lost_node_fails_the_job_when_retry_on_leaves_it_out(world: World) -> None:
    job = _placed(world, max_restarts=0, retry={"on": [], "backoff_seconds": 0})
    release_lost_nodes(lost_node_ids=[world.node.pk], lost_after_s=30, now=timezone.now())
    job.refresh_from_db()
    assert (job.state, job.end_cause, job.infra_restarts) == (JobState.FAILED, "node_lost", 0)


def test_a_preemption_spends_max_restarts_when_retry_on_leaves_it_out(world: World) -> None:
    plain = _placed(world)
    assert preempt_job(job=plain, grace_seconds=5, reason="reclaimed", now=timezone.now())
    plain.refresh_from_db()
    assert (plain.restarts, plain.end_cause) == (0, "preempted")

    counted = _placed(world, max_restarts=1, retry={"on": [], "backoff_seconds": 0})
    assert preempt_job(job=counted, grace_seconds=5, reason="reclaimed", now=timezone.now())
    counted.refresh_from_db()
    assert (counted.state, counted.restarts) == (JobState.PREEMPTED, 1)
    Job.objects.filter(pk=counted.pk).update(state=JobState.RUNNING)
    assert preempt_job(job=counted, grace_seconds=5, reason="reclaimed", now=timezone.now())
    counted.refresh_from_db()
    assert (counted.state, counted.end_cause) == (JobState.FAILED, "preempted")


def test_a_stall_restarts_from_the_checkpoint_until_its_budget_is_spent(world: World) -> None:
    # `stalled` is in the default retry.on: retry.max bounds it, not max_restarts.
    job = _placed(world, max_restarts=0, retry={"max": 1, "backoff_seconds": 0})
    now = timezone.now()
    assert restart_from_checkpoint(job, reason="stalled", cause="stalled", actor="t", now=now)
    job.refresh_from_db()
    assert (job.state, job.restarts, job.infra_restarts) == (JobState.RESTARTING, 0, 1)
    assert job.end_cause == "stalled"
    assert set(job.tasks.values_list("attempt", flat=True)) == {2}
    _restart_all(job)
    assert not restart_from_checkpoint(job, reason="stalled", cause="stalled", actor="t", now=now)
    # Left out of retry.on, a stall spends one of max_restarts.
    user = _placed(world, max_restarts=1, retry={"on": [], "backoff_seconds": 0})
    assert restart_from_checkpoint(user, reason="stalled", cause="stalled", actor="t", now=now)
    user.refresh_from_db()
    assert (user.restarts, user.infra_restarts) == (1, 0)
