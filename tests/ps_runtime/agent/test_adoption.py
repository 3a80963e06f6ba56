"""A restarted agent adopts the tasks its predecessor left: live ones are watched again
from the saved offsets with nothing new reported; ended ones are reported once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from ps_runtime.agent import tasktable
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import TaskKey
from ps_runtime.agent.reconcile import reconcile
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.agent.taskfiles import LOST_MESSAGE, STATUS_FILE, TABLE_FILE

from .helpers import (
    FAKE_COMMAND,
    cleanup_pid,
    fake_task,
    log_lines,
    pid_alive,
    statuses,
    wait_for,
)

KEY = TaskKey(31, 1)

# An agent that starts one task, saves the task table and dies without stopping it.
DYING_AGENT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from ps_runtime.agent.outbox import Outbox
    from ps_runtime.agent.supervisor import Supervisor
    from tests.ps_runtime.agent.helpers import FAKE_COMMAND, fake_task

    sup = Supervisor(Outbox(), Path(sys.argv[1]), command=FAKE_COMMAND)
    tp = sup.start(fake_task(mode=sys.argv[2]))
    while tp.offsets["stdout"] == 0:
        time.sleep(0.01)
    if sys.argv[3] == "commit":
        sup.commit(sup.offsets_snapshot())
    elif sys.argv[3] == "stop":
        sup.stop(tp.key, grace=5.0)
        time.sleep(0.2)  # SIGTERM sent (by the stopper thread), then the agent dies
    print(tp.pid, flush=True)
    os._exit(0)
    """
)


def _dying_agent(work: Path, mode: str, commit: bool, then: str = "-") -> int:
    done = subprocess.run(
        [sys.executable, "-c", DYING_AGENT, str(work), mode, "commit" if commit else then],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(done.stdout.strip())


def _drain(outbox: Outbox, into: list[dict[str, Any]]) -> list[dict[str, Any]]:
    into.extend(m.to_wire() for m in outbox.drain())
    return into


def test_a_live_task_is_adopted_and_streams_on_from_the_saved_offsets(tmp_path: Path) -> None:
    pid = _dying_agent(tmp_path, "serve", commit=True)
    try:
        [record] = tasktable.load(tmp_path / TABLE_FILE)
        assert (record.id, record.attempt, record.pid) == (31, 1, pid)
        assert tasktable.alive(record)
        task_dir = Path(record.task_dir)
        stdout = (task_dir / "stdout.log").read_bytes()
        unsent = stdout[record.offsets["stdout"] :].decode().splitlines()

        outbox = Outbox()
        sup = Supervisor(outbox, tmp_path, command=FAKE_COMMAND)
        assert sup.adopt() == [KEY]
        assert sup.live_keys() == {KEY} and sup.live_pids() == {KEY: pid}
        messages: list[dict[str, Any]] = []
        # What was delivered before is not sent again; what was not, is; nothing restarts.
        wait_for(lambda: log_lines(_drain(outbox, messages), "stdout") == unsent)
        assert "hello from task" not in log_lines(messages, "stdout")
        assert statuses(messages) == []
        # The platform rescheduled: attempt 2 is desired, so the adopted attempt 1 stops.
        plan = reconcile([fake_task(attempt=2)], sup.live_keys(), sup.finished_keys())
        assert plan.stops == (KEY,)
        sup.stop(KEY, grace=5.0)
        wait_for(lambda: statuses(_drain(outbox, messages)) == [(31, 1, "stopped")])
        assert not tasktable.alive(record)
        sup.commit(sup.offsets_snapshot())
        assert tasktable.load(tmp_path / TABLE_FILE) == []
    finally:
        cleanup_pid(pid)


def test_a_task_that_ended_while_the_agent_was_down_is_reported_with_its_status(
    tmp_path: Path,
) -> None:
    _dying_agent(tmp_path, "exit", commit=False)
    [record] = tasktable.load(tmp_path / TABLE_FILE)
    # Its status written and its process gone (else adopt() rightly finds it alive).
    wait_for(lambda: (Path(record.task_dir) / STATUS_FILE).exists())
    wait_for(lambda: not pid_alive(record.pid))
    outbox = Outbox()
    sup = Supervisor(outbox, tmp_path, command=FAKE_COMMAND)
    assert sup.adopt() == []
    messages: list[dict[str, Any]] = []
    wait_for(lambda: statuses(_drain(outbox, messages)) == [(31, 1, "succeeded")])
    # Nothing was committed: all of its output is delivered, then its status.
    assert log_lines(messages, "stdout")[0] == "hello from task"
    assert sup.finished_keys() == {KEY} and sup.live_keys() == set()


def test_a_task_the_agent_stopped_before_it_died_is_reported_stopped(tmp_path: Path) -> None:
    _dying_agent(tmp_path, "serve", commit=False, then="stop")
    [record] = tasktable.load(tmp_path / TABLE_FILE)
    # Its status written and its process gone (else adopt() rightly finds it alive).
    wait_for(lambda: (Path(record.task_dir) / STATUS_FILE).exists())
    wait_for(lambda: not pid_alive(record.pid))
    outbox = Outbox()
    sup = Supervisor(outbox, tmp_path, command=FAKE_COMMAND)
    sup.adopt()
    messages: list[dict[str, Any]] = []
    wait_for(lambda: statuses(_drain(outbox, messages)) == [(31, 1, "stopped")])


def test_a_task_without_a_status_is_reported_lost(tmp_path: Path) -> None:
    task_dir = tmp_path / "tasks" / "31-1"
    task_dir.mkdir(parents=True)
    (task_dir / "stdout.log").write_text("last words\n")
    record = tasktable.TaskRecord(
        id=31,
        attempt=1,
        job_id=12,
        pid=os.getpid(),
        start_time=1,  # not this process's: the pid was reused
        task_dir=str(task_dir),
        offsets={"stdout": 0, "stderr": 0, "metrics": 0},
        task=fake_task().to_wire(),
    )
    tasktable.save(tmp_path / TABLE_FILE, [record])
    outbox = Outbox()
    sup = Supervisor(outbox, tmp_path, command=FAKE_COMMAND)
    assert sup.adopt() == []
    messages: list[dict[str, Any]] = []
    wait_for(lambda: statuses(_drain(outbox, messages)) == [(31, 1, "failed")])
    [status] = [m for m in messages if m["type"] == "task_status"]
    assert status["message"] == LOST_MESSAGE and status["exit_code"] is None
    assert log_lines(messages, "stdout") == ["last words"]


def test_an_unreadable_table_is_ignored(tmp_path: Path) -> None:
    (tmp_path / TABLE_FILE).write_text(json.dumps({"version": 99}))
    sup = Supervisor(Outbox(), tmp_path, command=FAKE_COMMAND)
    assert sup.adopt() == []
