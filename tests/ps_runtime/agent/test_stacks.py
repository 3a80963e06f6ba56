"""A stalled job's stacks, taken from real task processes (`agent/stacks.py`): with
py-spy from outside, with the task's own faulthandler, and for a process that SIGSTOP
froze a word instead of a stack; a Python process that does not catch the signal is
never sent it. The agent does it on the server's `capture_stacks`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ps_runtime import taskenv
from ps_runtime.agent import stacks
from ps_runtime.agent.daemon import Agent
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import DesiredTask, Logs, StackMethod, Stacks
from ps_runtime.agent.state import AgentState
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.agent.taskfiles import TaskProcess
from ps_runtime.taskenv import Role

from ...conftest import skip_outside_ci
from .control_plane import FakeControlPlane
from .helpers import FAKE_COMMAND, fake_task, pid_alive, wait_for

JOB = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker(task_id: int = 41) -> DesiredTask:
    """A real `python -m ps_runtime.task` worker: it serves gRPC and waits."""
    env = {
        "TRAINHUB_ROLE": "worker",
        "TRAINHUB_JOB_ID": str(JOB),
        "TRAINHUB_BIND": f"127.0.0.1:{_free_port()}",
        "TRAINHUB_JOB_TOKEN": "t0ken",
    }
    return DesiredTask(id=task_id, attempt=1, job_id=JOB, role=Role.WORKER, index=0, env=env)


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture
def supervisor(outbox: Outbox, tmp_path: Path) -> Iterator[Supervisor]:
    sup = Supervisor(outbox, tmp_path)  # the real task command, unsandboxed
    yield sup
    sup.stop_all(grace=1.0)


def started(sup: Supervisor, task: DesiredTask, ready: str) -> TaskProcess:
    tp = sup.start(task)
    assert tp is not None
    stderr = tp.task_dir / "stderr.log"
    wait_for(lambda: ready in stderr.read_text(errors="replace"), 30, ready)
    return tp


def python_pid(tp: TaskProcess) -> int:
    [pid] = [p for p in stacks.descendants(tp.pid) if stacks.is_python(p)]
    return pid


def the_stacks(outbox: Outbox) -> tuple[list[Stacks], list[str]]:
    messages = outbox.drain()
    logged = [line for m in messages if isinstance(m, Logs) for line in m.lines]
    return [m for m in messages if isinstance(m, Stacks)], logged


def test_a_task_catches_the_stacks_signal_and_writes_them_with_faulthandler(
    supervisor: Supervisor, outbox: Outbox
) -> None:
    tp = started(supervisor, worker(), "serving on")
    pid = python_pid(tp)
    assert stacks.catches(pid, taskenv.STACKS_SIGNAL)  # ps_runtime.task registered it
    assert stacks.capture_job(supervisor, outbox, JOB, pyspy=None) == 1
    [taken], _ = the_stacks(outbox)
    assert (taken.task, taken.method) == (tp.key, StackMethod.FAULTHANDLER)
    assert "Current thread" in taken.text or "Thread 0x" in taken.text
    assert 'ps_runtime/launch/task.py", line' in taken.text and "in serve" in taken.text
    assert pid_alive(pid)  # the signal dumped, it did not kill
    stderr = (tp.task_dir / "stderr.log").read_text()
    assert "in serve" in stderr  # the task's log has them, as the tailer delivers it


def test_py_spy_dumps_a_task_from_outside_into_its_log(
    supervisor: Supervisor, outbox: Outbox
) -> None:
    pyspy = stacks.pyspy_path()
    if pyspy is None:
        skip_outside_ci("py-spy is not installed (platform/pyproject.toml's dev extra has it)")
    tp = started(supervisor, worker(), "serving on")
    assert stacks.capture_job(supervisor, outbox, JOB, pyspy=pyspy) == 1
    [taken], logged = the_stacks(outbox)
    assert taken.method == StackMethod.PY_SPY
    assert "serve (ps_runtime/launch/task.py" in taken.text, taken.text
    head = f"[trainhub] stall: Python stacks of worker 0, process {python_pid(tp)} (py-spy):"
    assert head in logged
    assert any("serve (ps_runtime/launch/task.py" in line for line in logged)


def test_a_stopped_task_is_said_to_be_stopped_and_left_as_it_is(
    supervisor: Supervisor, outbox: Outbox
) -> None:
    tp = started(supervisor, worker(), "serving on")
    pid = python_pid(tp)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: stacks.state_of(pid) in stacks.STOPPED, 5, "stopped")
        stacks.capture_job(supervisor, outbox, JOB, pyspy=stacks.pyspy_path())
        [taken], logged = the_stacks(outbox)
        if taken.method == StackMethod.NONE:  # py-spy cannot read it here, or is absent
            assert f"process {pid}: it is stopped (SIGSTOP" in taken.text
            assert any("it is stopped (SIGSTOP" in line for line in logged)
        else:  # a py-spy that reads stopped processes
            assert taken.method == StackMethod.PY_SPY and "serve" in taken.text
        status = Path(f"/proc/{pid}/status").read_text()
        assert "SigPnd:\t0000000000000000" in status  # no signal was sent to it
        assert "ShdPnd:\t0000000000000000" in status
    finally:
        os.kill(pid, signal.SIGCONT)
    assert pid_alive(pid)


def test_a_python_process_without_the_handler_is_never_signalled(
    outbox: Outbox, tmp_path: Path
) -> None:
    sup = Supervisor(outbox, tmp_path, command=FAKE_COMMAND)
    try:
        tp = started(sup, fake_task(task_id=43, mode="serve"), "a warning")
        pid = python_pid(tp)
        assert not stacks.catches(pid, taskenv.STACKS_SIGNAL)
        stacks.capture_job(sup, outbox, JOB, pyspy=None)
        [taken], _ = the_stacks(outbox)
        assert taken.method == StackMethod.NONE
        assert "neither py-spy nor faulthandler gave a stack" in taken.text
        assert pid_alive(pid)
    finally:
        sup.stop_all(grace=1.0)


def test_only_the_jobs_tasks_are_taken(supervisor: Supervisor, outbox: Outbox) -> None:
    assert stacks.capture_job(supervisor, outbox, JOB, pyspy=None) == 0
    started(supervisor, worker(), "serving on")
    assert stacks.capture_job(supervisor, outbox, JOB + 1, pyspy=None) == 0
    assert the_stacks(outbox)[0] == []


def test_the_process_tree_and_signal_mask_are_read_from_proc(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    rows = {1: (0, "systemd"), 10: (1, "python3.11"), 11: (10, "bwrap"), 12: (11, "python")}
    for pid, (parent, name) in rows.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} ({name}) S {parent} 1 1 0")
    (proc / "12" / "status").write_text("Name:\tpython\nSigCgt:\t0000000000000800\n")
    assert stacks.descendants(10, proc) == [11, 12]
    assert [p for p in stacks.descendants(1, proc) if stacks.is_python(p, proc)] == [10, 12]
    assert stacks.catches(12, signal.SIGUSR2, proc)  # bit 12 - 1
    assert not stacks.catches(12, signal.SIGUSR1, proc)
    assert stacks.state_of(12, proc) == "S" and stacks.state_of(99, proc) == ""


def test_the_agent_takes_them_when_the_server_asks(tmp_path: Path) -> None:
    """The daemon: `capture_stacks` down, a `stacks` message and log lines up."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        agent = Agent(
            AgentState(cp.url, 7, cp.credential),
            tmp_path / "work",
            flush_interval=0.2,
            stop_tasks_on_exit=True,  # nothing outlives the test
        )
        run = asyncio.create_task(agent.run())
        try:
            task = worker()
            cp.set_tasks([{**task.to_wire()}])
            await cp.notify_tasks_changed()
            await _until(lambda: any("serving on" in line for line in _stderr(cp)))
            for ws in cp.open_sockets:
                await ws.send(json.dumps({"type": "capture_stacks", "job_id": JOB}))
            [taken] = await _until(lambda: cp.of_type("stacks"), timeout=30)
            assert (taken["id"], taken["attempt"]) == (task.id, 1)
            assert taken["method"] in ("py-spy", "faulthandler") and "serve" in taken["text"]
        finally:
            agent.request_stop()
            await run
            await cp.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def _stderr(cp: FakeControlPlane) -> list[str]:
    return [line for m in cp.of_type("logs") if m["stream"] == "stderr" for line in m["lines"]]


async def _until(predicate: Any, timeout: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if result := predicate():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s")
