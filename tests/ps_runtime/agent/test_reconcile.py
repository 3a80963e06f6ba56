"""Reconcile: desired tasks against local processes keyed by (id, attempt)."""

from __future__ import annotations

from ps_runtime.agent.protocol import DesiredTask, TaskKey
from ps_runtime.agent.reconcile import reconcile
from ps_runtime.taskenv import Role


def _task(task_id: int, attempt: int = 1) -> DesiredTask:
    return DesiredTask(id=task_id, attempt=attempt, job_id=1, role=Role.WORKER, index=0)


def test_nothing_desired_nothing_running() -> None:
    assert reconcile([], set()).empty


def test_starts_missing_tasks_in_id_order() -> None:
    plan = reconcile([_task(3), _task(1)], set())
    assert [t.key for t in plan.starts] == [TaskKey(1, 1), TaskKey(3, 1)]
    assert plan.stops == ()


def test_running_and_desired_is_left_alone() -> None:
    assert reconcile([_task(1)], {TaskKey(1, 1)}).empty


def test_stops_what_is_no_longer_desired() -> None:
    plan = reconcile([_task(1)], {TaskKey(1, 1), TaskKey(2, 1)})
    assert plan.starts == ()
    assert plan.stops == (TaskKey(2, 1),)


def test_new_attempt_stops_old_and_starts_new() -> None:
    plan = reconcile([_task(1, attempt=2)], {TaskKey(1, 1)})
    assert plan.stops == (TaskKey(1, 1),)
    assert [t.key for t in plan.starts] == [TaskKey(1, 2)]


def test_only_highest_attempt_of_an_id_counts() -> None:
    plan = reconcile([_task(1, attempt=1), _task(1, attempt=3)], {TaskKey(1, 1)})
    assert plan.stops == (TaskKey(1, 1),)
    assert [t.key for t in plan.starts] == [TaskKey(1, 3)]


def test_finished_attempt_is_not_restarted_while_desired() -> None:
    # It exited by itself; a restart is the control plane's call (a new attempt).
    plan = reconcile([_task(1)], set(), finished={TaskKey(1, 1)})
    assert plan.empty


def test_finished_attempts_no_longer_desired_are_forgotten() -> None:
    plan = reconcile([_task(1, attempt=2)], set(), finished={TaskKey(1, 1), TaskKey(5, 1)})
    assert plan.forget == (TaskKey(1, 1), TaskKey(5, 1))
    assert [t.key for t in plan.starts] == [TaskKey(1, 2)]


def test_everything_stops_when_desired_list_empties() -> None:
    plan = reconcile([], {TaskKey(1, 1), TaskKey(2, 4)})
    assert plan.stops == (TaskKey(1, 1), TaskKey(2, 4))
    assert plan.starts == ()
