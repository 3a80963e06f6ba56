"""The agent daemon against an in-test control plane (WebSocket + HTTP on one port)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ps_runtime.agent import cli, rest
from ps_runtime.agent.daemon import Agent
from ps_runtime.agent.protocol import TaskKey, parse_from_agent
from ps_runtime.agent.state import AgentState, load_state, save_state

from .control_plane import FakeControlPlane
from .helpers import FAKE_COMMAND, log_lines, metric_points, pid_alive, statuses

REPO = Path(__file__).resolve().parents[3]
HOUR = timedelta(hours=1)


def _task_json(task_id: int = 31, attempt: int = 1, mode: str = "serve") -> dict[str, Any]:
    return {
        "id": task_id,
        "job_id": 12,
        "role": "ps",
        "index": 0,
        "attempt": attempt,
        "resources": {"cpu": 1.0, "memory_mb": 2048, "gpu_indices": []},
        "env": {"TRAINHUB_ROLE": "ps", "TRAINHUB_JOB_ID": "12", "TRAINHUB_FAKE_MODE": mode},
    }


async def _until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        result = predicate()
        if result:
            return result
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _run(scenario: Coroutine[Any, Any, None], timeout: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(scenario, timeout))


def _agent(state: AgentState, tmp_path: Path, **kwargs: Any) -> Agent:
    if state.credential_expires_at is None:  # not due for renewal (tests/…/test_renewal.py)
        now = datetime.now(UTC)
        state = replace(state, credential_issued_at=now, credential_expires_at=now + HOUR)
    options: dict[str, Any] = {
        "command": FAKE_COMMAND,
        "heartbeat_interval": 0.5,
        "flush_interval": 0.2,
        "stop_tasks_on_exit": True,  # nothing outlives a test unless it asks
        **kwargs,
    }
    return Agent(state, tmp_path / "work", **options)


def test_enroll_run_tasks_reconnect_and_stop(tmp_path: Path) -> None:
    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        state_file = tmp_path / "cfg" / "agent.json"
        code = await asyncio.to_thread(
            cli.main,
            [
                "enroll",
                "--server",
                cp.url,
                "--token",
                "good-token",
                "--state-file",
                str(state_file),
                "--address",
                "10.0.0.5",
            ],
        )
        assert code == 0
        [enrollment] = cp.enrollments
        assert enrollment["token"] == "good-token"
        assert enrollment["address"] == "10.0.0.5"
        assert enrollment["cpus"] == len(os.sched_getaffinity(0))
        assert enrollment["memory_mb"] > 0 and enrollment["hostname"]
        assert enrollment["gpus"] == []  # no nvidia-smi here
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        state = load_state(state_file)
        assert (state.server, state.node_id, state.credential) == (cp.url, 7, "s3cret-cred")
        assert state.credential_expires_at is not None

        cp.set_tasks([_task_json()])
        agent = _agent(state, tmp_path)
        run = asyncio.create_task(agent.run())

        def status_seen(task_id: int, attempt: int, state: str) -> bool:
            return (task_id, attempt, state) in statuses(cp.received)

        await _until(lambda: status_seen(31, 1, "running"), what="running")
        assert cp.ws_auth[0] == "Node s3cret-cred"
        assert cp.http_auth[0] == "Node s3cret-cred"
        await _until(lambda: metric_points(cp.received), what="metrics")
        assert metric_points(cp.received)[0]["values"] == {"train_loss": 0.93}
        await _until(lambda: "a warning" in log_lines(cp.received, "stderr"), what="stderr")
        assert "hello from task" in log_lines(cp.received, "stdout")
        assert "[unparsable metrics] this is not json" in log_lines(cp.received, "stderr")
        heartbeat = await _until(
            lambda: next((m for m in cp.of_type("heartbeat") if m["tasks"]), None),
            what="heartbeat with the task",
        )
        [entry] = heartbeat["tasks"]
        assert (entry["id"], entry["attempt"]) == (31, 1)
        first_pid = entry["pid"]
        assert pid_alive(first_pid)
        assert set(heartbeat["usage"]) == {
            "cpu_percent",
            "memory_used_mb",
            "cpus",
            "memory_total_mb",
        }
        # The node's totals, measured as enrollment measured them.
        assert heartbeat["usage"]["cpus"] == enrollment["cpus"]
        assert heartbeat["usage"]["memory_total_mb"] == enrollment["memory_mb"]

        # The server drops the socket: the agent reconnects and keeps the task running.
        beats = len(cp.of_type("heartbeat"))
        cp.drop_connections()
        await _until(lambda: len(cp.ws_auth) >= 2 and cp.open_sockets, what="reconnect")
        await _until(lambda: len(cp.of_type("heartbeat")) > beats, what="heartbeat")
        assert agent.connections == 2
        assert pid_alive(first_pid)
        assert statuses(cp.received).count((31, 1, "running")) == 1

        # A new attempt of the same id: the old one stops, then the new one starts.
        cp.set_tasks([_task_json(attempt=2)])
        await cp.notify_tasks_changed()
        await _until(lambda: status_seen(31, 2, "running"), what="attempt 2 running")
        assert status_seen(31, 1, "stopped")
        order = statuses(cp.received)
        assert order.index((31, 1, "stopped")) < order.index((31, 2, "running"))
        assert not pid_alive(first_pid)

        # Once attempt 2 printed (its SIGTERM handler is in place), the desired list
        # empties: the task is stopped and reported so.
        await _until(
            lambda: log_lines(cp.received, "stdout").count("hello from task") >= 2,
            what="attempt 2 output",
        )
        cp.set_tasks([])
        await cp.notify_tasks_changed()
        await _until(lambda: status_seen(31, 2, "stopped"), what="attempt 2 stopped")
        stopped = [m for m in cp.of_type("task_status") if m["state"] == "stopped"][-1]
        assert stopped == {
            "type": "task_status",
            "id": 31,
            "attempt": 2,
            "state": "stopped",
            "exit_code": 0,
            "message": "exited with code 0",
        }
        assert agent.supervisor.live_pids() == {}

        agent.request_stop()
        assert await run == 0
        await cp.close()

    _run(scenario())


def test_periodic_reconcile_and_no_restart_after_exit(tmp_path: Path) -> None:
    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path, reconcile_interval=0.3)
        run = asyncio.create_task(agent.run())
        await _until(lambda: cp.open_sockets, what="connect")
        # No tasks_changed notice: the periodic reconcile must pick the task up.
        cp.set_tasks([_task_json(mode="exit")])
        await _until(lambda: (31, 1, "succeeded") in statuses(cp.received), what="succeeded")
        await asyncio.sleep(1.0)  # several reconcile rounds while the task is still desired
        assert statuses(cp.received) == [(31, 1, "running"), (31, 1, "succeeded")]
        agent.request_stop()
        assert await run == 0
        await cp.close()

    _run(scenario())


def test_a_refused_desired_list_changes_nothing_and_reconcile_goes_on(tmp_path: Path) -> None:
    """`cpu: inf` once killed the reconcile loop; now the list is refused as a whole (so
    nothing running is stopped) and the next good list is applied."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        cp.set_tasks([_task_json()])
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path, reconcile_interval=0.3)
        run = asyncio.create_task(agent.run())
        await _until(lambda: (31, 1, "running") in statuses(cp.received), what="31 running")
        bad = _task_json(task_id=32)
        bad["resources"]["cpu"] = float("inf")
        cp.set_tasks([bad])
        await cp.notify_tasks_changed()
        await asyncio.sleep(1.0)  # several reconcile rounds
        assert agent.supervisor.live_keys() == {TaskKey(31, 1)}
        cp.set_tasks([_task_json(task_id=32)])
        await _until(lambda: (32, 1, "running") in statuses(cp.received), what="32 running")
        await _until(lambda: (31, 1, "stopped") in statuses(cp.received), what="31 stopped")
        agent.request_stop()
        assert await run == 0
        # Everything the agent sent is what the control plane's parser accepts.
        for message in cp.received:
            parse_from_agent(message)
        await cp.close()

    _run(scenario())


def test_rejected_credential_exits_nonzero_with_reenroll_hint(tmp_path: Path) -> None:
    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        agent = _agent(AgentState(cp.url, 7, "revoked"), tmp_path)
        assert await agent.run() == 1
        assert agent.fatal_message is not None and "enroll" in agent.fatal_message
        await cp.close()

    _run(scenario(), timeout=15)


def test_sigterm_stops_running_tasks_and_reports_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        cp.set_tasks([_task_json(mode="grandchild")])  # ignores SIGTERM: needs the SIGKILL
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path)
        run = asyncio.create_task(agent.run())
        await _until(lambda: (31, 1, "running") in statuses(cp.received), what="running")
        line = await _until(
            lambda: next(
                (x for x in log_lines(cp.received, "stdout") if x.startswith("GRANDCHILD ")), None
            ),
            what="grandchild pid",
        )
        pid = agent.supervisor.live_pids()[TaskKey(31, 1)]
        os.kill(os.getpid(), signal.SIGTERM)  # the agent's handler, not pytest's death
        assert await run == 0
        assert not pid_alive(pid) and not pid_alive(int(line.split()[1]))
        # The final status went out before the agent closed its socket.
        await _until(lambda: (31, 1, "stopped") in statuses(cp.received), 2, "stopped")
        await cp.close()

    _run(scenario())


def test_sigterm_leaves_tasks_running_and_the_next_agent_adopts_them(tmp_path: Path) -> None:
    """The default stop (a restart, an upgrade): the task keeps running, everything it
    wrote was delivered, and the next agent takes it over without restarting it."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        cp.set_tasks([_task_json()])
        state = AgentState(cp.url, 7, cp.credential)
        first = _agent(state, tmp_path, stop_tasks_on_exit=False)
        run = asyncio.create_task(first.run())
        await _until(lambda: (31, 1, "running") in statuses(cp.received), what="running")
        await _until(lambda: "hello from task" in log_lines(cp.received, "stdout"), what="out")
        pid = first.supervisor.live_pids()[TaskKey(31, 1)]
        os.kill(os.getpid(), signal.SIGTERM)  # the agent's handler, not pytest's death
        assert await run == 0
        assert pid_alive(pid), "a clean stop of the agent ended its task"
        assert (31, 1, "stopped") not in statuses(cp.received)

        second = _agent(state, tmp_path)
        run = asyncio.create_task(second.run())
        await _until(lambda: second.supervisor.live_pids(), what="adopted")
        assert second.supervisor.live_pids() == {TaskKey(31, 1): pid}
        await asyncio.sleep(1.0)  # reconciled against the same desired list: kept
        assert pid_alive(pid)
        assert statuses(cp.received) == [(31, 1, "running")]  # no new attempt, no restart
        assert log_lines(cp.received, "stdout").count("hello from task") == 1  # no repeat
        second.request_stop()  # this one stops its tasks (the helper's default)
        assert await run == 0
        assert not pid_alive(pid)
        await _until(lambda: (31, 1, "stopped") in statuses(cp.received), 2, "stopped")
        await cp.close()

    _run(scenario())


def test_unacknowledged_messages_are_sent_again_after_a_reconnect(tmp_path: Path) -> None:
    """The server stops acknowledging and the connection is cut: the task's status and
    output go again on the next connection, and the task table records them only once
    they are acknowledged."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        cp.acking = False
        cp.set_tasks([_task_json(mode="exit")])
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path, reconcile_interval=60)
        run = asyncio.create_task(agent.run())
        await _until(lambda: (31, 1, "succeeded") in statuses(cp.received), what="succeeded")
        assert agent.outbox.in_flight() > 0
        table = tmp_path / "work" / "tasks.json"
        assert '"id": 31' in table.read_text()  # not acknowledged: not done with yet
        first = len(cp.received)
        cp.acking = True
        cp.drop_connections()
        await _until(
            lambda: (31, 1, "succeeded") in statuses(cp.received[first:]), what="sent again"
        )
        await _until(lambda: not agent.outbox.in_flight(), what="acknowledged")
        assert agent.uplink.resent > 0
        again = cp.received[first:]
        assert (31, 1, "succeeded") in statuses(again)  # sent again, numbered anew
        assert "hello from task" in log_lines(again, "stdout")
        assert cp.seqs[first] == 1
        await _until(lambda: '"id": 31' not in table.read_text(), what="table updated")
        agent.request_stop()
        assert await run == 0
        await cp.close()

    _run(scenario())


def test_agent_process_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`trainhub-agent run` as a real process: connects, exits 0 on SIGTERM."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        state_file = tmp_path / "agent.json"
        save_state(state_file, AgentState(cp.url, 7, cp.credential))
        # The real task module may not exist yet: desire nothing, then check shutdown.
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "ps_runtime.agent.cli",
            "run",
            "--state-file",
            str(state_file),
            "--work-dir",
            str(tmp_path / "work"),
            cwd=REPO,
            stderr=asyncio.subprocess.PIPE,
        )
        await _until(lambda: cp.open_sockets and cp.http_auth, what="agent connected")
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 0, stderr.decode()
        assert b"s3cret-cred" not in stderr  # the credential is never logged
        await cp.close()

    _run(scenario())


def test_a_task_of_an_ended_job_stops_without_its_own_long_grace(tmp_path: Path) -> None:
    """A cancelled job's coordinator (listed with a checkpoint grace) is killed after the
    response-level grace: a cancel never waits for a job's code to honour SIGTERM."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path)
        coordinator = {**_task_json(31, mode="stubborn"), "stop_grace_seconds": 60}
        cp.desired = {"node_id": 7, "stop_grace_seconds": 0.3, "tasks": [coordinator]}
        http = rest.Client({"Authorization": f"Node {cp.credential}"}, timeout=10.0)
        await agent.reconcile_once(http)
        pid = agent.supervisor.live_pids()[TaskKey(31, 1)]
        seen: list[dict[str, Any]] = []

        def ignoring_sigterm() -> bool:
            seen.extend(m.to_wire() for m in agent.outbox.drain())
            return "hello from task" in log_lines(seen, "stdout")

        await _until(ignoring_sigterm, what="the task ignoring SIGTERM")
        cp.desired = {"node_id": 7, "stop_grace_seconds": 0.3, "ended_jobs": [12], "tasks": []}
        try:
            await agent.reconcile_once(http)
            await _until(lambda: not pid_alive(pid), 3.0, "the ended job's task killed")
        finally:  # a failure leaves no stubborn process behind
            if pid_alive(pid):
                os.killpg(pid, signal.SIGKILL)
            await cp.close()

    _run(scenario())


def test_unlisted_task_stops_with_the_grace_of_its_last_listing(tmp_path: Path) -> None:
    """Per-task stop_grace_seconds: the latest listing's value wins, else the response's."""

    async def scenario() -> None:
        cp = await FakeControlPlane().start()
        agent = _agent(AgentState(cp.url, 7, cp.credential), tmp_path)
        # Both ignore SIGTERM, so each lives exactly until its SIGKILL.
        long_then_short = {**_task_json(31, mode="stubborn"), "stop_grace_seconds": 30}
        fallback = _task_json(32, mode="stubborn")
        cp.desired = {"node_id": 7, "stop_grace_seconds": 30, "tasks": [long_then_short, fallback]}
        http = rest.Client({"Authorization": f"Node {cp.credential}"}, timeout=10.0)
        await agent.reconcile_once(http)
        pids = agent.supervisor.live_pids()
        assert set(pids) == {TaskKey(31, 1), TaskKey(32, 1)}
        seen: list[dict[str, Any]] = []

        def both_ignore_sigterm() -> bool:
            seen.extend(m.to_wire() for m in agent.outbox.drain())
            return log_lines(seen, "stdout").count("hello from task") == 2

        await _until(both_ignore_sigterm, what="both tasks ignoring SIGTERM")
        # A later listing shortens task 31's grace; then both leave the list, whose
        # response-level grace (task 32's fallback) is 3 s.
        cp.set_tasks([{**long_then_short, "stop_grace_seconds": 0.3}, fallback])
        await agent.reconcile_once(http)
        cp.desired = {"node_id": 7, "stop_grace_seconds": 3, "tasks": []}
        loop = asyncio.get_running_loop()
        started = loop.time()
        await agent.reconcile_once(http)
        await _until(lambda: not pid_alive(pids[TaskKey(31, 1)]), 2.0, "task 31 killed")
        assert pid_alive(pids[TaskKey(32, 1)])
        await _until(lambda: not pid_alive(pids[TaskKey(32, 1)]), 5.0, "task 32 killed")
        assert loop.time() - started >= 3 * 0.9
        assert agent.supervisor.stop_all(grace=0.5)
        await cp.close()

    _run(scenario())
