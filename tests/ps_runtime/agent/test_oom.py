"""The agent tells the server when the kernel's OOM killer struck in a task's cgroup: it
reads the cgroup's `oom_kill` count before removing the cgroup, and a failed task's status
carries `oom_killed` (docs/protocol.md), which the server words as `out_of_memory`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ps_runtime.agent import cgroups, tasktable
from ps_runtime.agent.isolation import Isolation
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import ProtocolError, ReportedState, TaskKey, TaskStatus
from ps_runtime.agent.protocol import parse_from_agent as parse
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.agent.taskfiles import STATUS_FILE, TaskProcess, outcome

from .helpers import fake_task, require_root, wait_for

# memory.events of a v2 cgroup after its task was OOM-killed (Linux 6.x).
V2_EVENTS = "low 0\nhigh 0\nmax 41\noom 1\noom_kill {kills}\noom_group_kill 0\n"
# memory.oom_control of a v1 memory cgroup (Linux 4.13+).
V1_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n"


def _cgroup(tmp_path: Path, version: int, name: str, text: str) -> cgroups.TaskCgroup:
    directory = tmp_path / f"task-{version}"
    directory.mkdir(parents=True)
    (directory / name).write_text(text)
    return cgroups.TaskCgroup(cgroups.Hierarchy(version, tmp_path), (directory,))


@pytest.mark.parametrize(
    ("version", "name", "text"),
    [(2, "memory.events", V2_EVENTS), (1, "memory.oom_control", V1_CONTROL)],
)
def test_the_oom_kill_count_of_either_hierarchy(
    tmp_path: Path, version: int, name: str, text: str
) -> None:
    assert cgroups.oom_killed(_cgroup(tmp_path / "a", version, name, text.format(kills=1)))
    assert not cgroups.oom_killed(_cgroup(tmp_path / "b", version, name, text.format(kills=0)))


def test_no_count_is_no_oom_kill(tmp_path: Path) -> None:
    """An older kernel, or a cgroup already gone."""
    bare = tmp_path / "bare"
    bare.mkdir()
    cgroup = cgroups.TaskCgroup(cgroups.Hierarchy(1, tmp_path), (bare, tmp_path / "gone"))
    assert not cgroups.oom_killed(cgroup)


def _ended(tmp_path: Path, returncode: int) -> TaskProcess:
    (tmp_path / STATUS_FILE).write_text(f"{returncode}\n")
    record = tasktable.TaskRecord(
        id=31, attempt=1, job_id=12, pid=1, start_time=0, task_dir=str(tmp_path)
    )
    return TaskProcess.adopted(fake_task(), record, hierarchy=None)


def test_a_failed_task_whose_cgroup_saw_the_oom_killer_says_so(tmp_path: Path) -> None:
    status = outcome(_ended(tmp_path, -9), None, stopped=False, oom=True)
    assert (status.state, status.exit_code, status.oom_killed) == (ReportedState.FAILED, 137, True)
    assert not outcome(_ended(tmp_path, -9), None, stopped=False).oom_killed
    # Stopped as asked, or succeeded: not the task's end, whatever the count says.
    assert not outcome(_ended(tmp_path, -9), None, stopped=True, oom=True).oom_killed
    assert not outcome(_ended(tmp_path, 0), None, stopped=False, oom=True).oom_killed


def test_the_status_carries_oom_killed_only_when_true() -> None:
    key = TaskKey(31, 2)
    killed = TaskStatus(key, ReportedState.FAILED, 137, "killed by SIGKILL", oom_killed=True)
    assert killed.to_wire()["oom_killed"] is True
    assert parse(killed.to_wire()) == killed
    plain = TaskStatus(key, ReportedState.FAILED, 137, "killed by SIGKILL")
    assert "oom_killed" not in plain.to_wire()  # what a server before the field reads
    assert parse(plain.to_wire()) == plain
    with pytest.raises(ProtocolError, match="oom_killed must be true or false"):
        parse({**killed.to_wire(), "oom_killed": "yes"})


HOG = "x = bytearray(256 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096])"


def test_a_task_over_its_cgroups_memory_is_reported_oom_killed(tmp_path: Path) -> None:
    """A real kernel: the supervisor starts a task that touches 256 MiB in a 32 MiB cgroup;
    the OOM killer ends it, and its failed status says `oom_killed`."""
    require_root()
    hierarchy = cgroups.detect()
    assert hierarchy is not None, "no cgroup hierarchy mounted"
    outbox = Outbox()
    supervisor = Supervisor(
        outbox,
        tmp_path,
        command=[sys.executable, "-c", HOG],
        isolation=Isolation(hierarchy=hierarchy),
    )
    task = fake_task(task_id=4242, memory_mb=32, cpu=0)
    try:
        supervisor.start(task)
        ended: list[TaskStatus] = []

        def status() -> bool:
            ended.extend(
                m for m in outbox.drain() if isinstance(m, TaskStatus) and m.state != "running"
            )
            return bool(ended)

        wait_for(status, 30, "the task's end")
    finally:
        supervisor.stop_all(grace=0.5)
    assert (ended[0].state, ended[0].exit_code, ended[0].oom_killed) == (
        ReportedState.FAILED,
        137,
        True,
    )
