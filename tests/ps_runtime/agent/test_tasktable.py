"""The task table on disk: atomic, 0600, strict, and process identity by start time."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ps_runtime.agent import tasktable, taskwrap
from ps_runtime.agent.fields import ProtocolError
from ps_runtime.agent.tasktable import TaskRecord


def _record(**overrides: object) -> TaskRecord:
    fields: dict[str, object] = {
        "id": 3,
        "attempt": 2,
        "job_id": 9,
        "pid": os.getpid(),
        "start_time": tasktable.process_start_time(os.getpid()) or 0,
        "task_dir": "/w/tasks/3-2",
        "cpus": [0, 1],
        "cgroup_dirs": ["/sys/fs/cgroup/trainhub/task-3-2"],
        "offsets": {"stdout": 10, "stderr": 0, "metrics": 7},
        "task": {"id": 3},
    }
    fields.update(overrides)
    return TaskRecord(**fields)  # type: ignore[arg-type]


def test_a_saved_table_loads_back_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    tasktable.save(path, [_record()])
    assert tasktable.load(path) == [_record()]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.with_name("tasks.json.tmp").exists()


def test_no_table_is_an_empty_table(tmp_path: Path) -> None:
    assert tasktable.load(tmp_path / "tasks.json") == []


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ("not json", "not JSON"),
        (json.dumps({"version": 2, "tasks": []}), "version must be 1"),
        (json.dumps({"version": 1, "tasks": {}}), "tasks must be a list"),
        (json.dumps({"version": 1, "tasks": [{"id": "x"}]}), "tasks[0].id"),
    ],
)
def test_a_table_it_did_not_write_is_refused_naming_the_field(
    tmp_path: Path, document: str, error: str
) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(document)
    with pytest.raises(ProtocolError, match=error.replace("[", r"\[").replace("]", r"\]")):
        tasktable.load(path)


def test_a_process_is_identified_by_pid_and_start_time() -> None:
    assert tasktable.alive(_record())
    assert not tasktable.alive(_record(start_time=1))  # a reused pid
    assert tasktable.process_start_time(2**22 + 1) is None


def _wrap(status: Path, *command: str) -> int:
    """Run the wrapper as the agent does (a process of its own: it sets signal handlers)."""
    argv = [sys.executable, "-I", taskwrap.__file__, str(status), "--", *command]
    return subprocess.run(argv, check=False, timeout=30).returncode


def test_the_wrapper_records_the_exit_status(tmp_path: Path) -> None:
    status = tmp_path / "exit-status"
    assert _wrap(status, "sh", "-c", "exit 3") == 3
    assert taskwrap.read_status(str(status)) == 3
    assert _wrap(status, "sh", "-c", "kill -9 $$") == 137
    assert taskwrap.read_status(str(status)) == -9
    assert _wrap(status, str(tmp_path / "nothing")) == 127
    assert taskwrap.read_status(str(tmp_path / "absent")) is None
