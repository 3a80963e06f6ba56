"""Supervisor with real child processes (a fake task script stands in for ps_runtime.task)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.agent import limits
from ps_runtime.agent.outbox import Outbox
from ps_runtime.agent.protocol import MetricPoint, ReportedState, TaskKey, TaskStatus
from ps_runtime.agent.supervisor import Supervisor
from ps_runtime.agent.taskfiles import parse_metric_line

from .helpers import (
    FAKE_COMMAND,
    cleanup_pid,
    fake_task,
    log_lines,
    metric_points,
    pid_alive,
    statuses,
    wait_for,
)


class Collector:
    """Drains an outbox, keeping every message in order."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.messages: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        self.messages.extend(m.to_wire() for m in self.outbox.drain())
        return self.messages

    def wait_status(self, key: TaskKey, state: str, timeout: float = 10.0) -> None:
        wait_for(
            lambda: (key.id, key.attempt, state) in statuses(self.poll()),
            timeout,
            f"{state} of {key}",
        )


NODE_CPUS = sorted(os.sched_getaffinity(0))


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture
def supervisor(outbox: Outbox, tmp_path: Path) -> Any:
    sup = Supervisor(outbox, tmp_path, cpus=NODE_CPUS, command=FAKE_COMMAND)
    yield sup
    sup.stop_all(grace=0.5)


def _info(messages: list[dict[str, Any]]) -> dict[str, Any]:
    line = next(x for x in log_lines(messages, "stdout") if x.startswith("INFO "))
    return dict(json.loads(line[5:]))


def test_task_runs_reports_logs_metrics_and_success(supervisor: Supervisor, outbox: Outbox) -> None:
    collector = Collector(outbox)
    task = fake_task(memory_mb=2048, gpu_indices=(1, 3))
    supervisor.start(task)
    collector.wait_status(task.key, "succeeded")
    messages = collector.messages
    assert statuses(messages) == [(31, 1, "running"), (31, 1, "succeeded")]
    final = messages[-1]
    assert final == {
        "type": "task_status",
        "id": 31,
        "attempt": 1,
        "state": "succeeded",
        "exit_code": 0,
        "message": "exited with code 0",
    }
    # All output arrived before the final status.
    assert "hello from task" in log_lines(messages, "stdout")
    assert "a warning" in log_lines(messages, "stderr")
    points = metric_points(messages)
    assert points[0] == {
        "step": 10,
        "time": "2025-01-01T00:00:00+00:00",
        "values": {"train_loss": 0.93},
    }
    assert points[1]["step"] == 11 and points[1]["time"]  # the agent fills a missing time
    # An unparsable metrics line is a log line, not a crash.
    assert "[unparsable metrics] this is not json" in log_lines(messages, "stderr")
    info = _info(messages)
    assert info["cuda"] == "1,3"
    assert info["role"] == "ps"
    # Its own session, led by the wrapper that records its exit status.
    assert info["pgid_is_pid"] is False and info["sid"] != os.getsid(0)
    assert "taskwrap.py" in info["parent"]
    assert info["rlimit_as"] == limits.address_space_limit(2048)
    assert info["rlimit_as"] >= 2 * 2048 * limits.MIB  # a legit 2 GiB task keeps headroom
    assert info["cwd"].endswith("tasks/31-1")
    assert supervisor.finished_keys() == {task.key}
    assert supervisor.live_keys() == set()


def test_failure_exit_code_and_no_gpus(supervisor: Supervisor, outbox: Outbox) -> None:
    collector = Collector(outbox)
    task = fake_task(TRAINHUB_FAKE_EXIT_CODE="3", cpu=0.5)
    supervisor.start(task)
    collector.wait_status(task.key, "failed")
    final = collector.messages[-1]
    assert (final["exit_code"], final["message"]) == (3, "exited with code 3")
    info = _info(collector.messages)
    assert info["cuda"] == ""
    assert info["affinity"] == NODE_CPUS[:1]  # ceil(0.5) = 1 core, the lowest free one


def test_cpu_affinity_spreads_over_free_cores() -> None:
    from collections import Counter

    assert limits.choose_cpus([0, 1, 2, 3], 1.5, Counter()) == [0, 1]
    assert limits.choose_cpus([0, 1, 2, 3], 1.5, Counter({0: 1, 1: 1})) == [2, 3]
    assert limits.choose_cpus([0, 1, 2, 3], 9, Counter()) == [0, 1, 2, 3]
    assert limits.choose_cpus([0, 1, 2, 3], 0, Counter()) == []


def test_missing_executable_reports_failed(outbox: Outbox, tmp_path: Path) -> None:
    sup = Supervisor(outbox, tmp_path, command=[str(tmp_path / "no-such-python")])
    task = fake_task()
    assert sup.start(task) is None
    [status] = outbox.drain()
    assert isinstance(status, TaskStatus)
    assert (status.state, status.exit_code) == (ReportedState.FAILED, None)
    assert "failed to start" in status.message
    assert sup.finished_keys() == {task.key}


def test_stop_reports_stopped(supervisor: Supervisor, outbox: Outbox) -> None:
    collector = Collector(outbox)
    task = fake_task(mode="serve")
    tp = supervisor.start(task)
    assert tp is not None
    wait_for(lambda: "hello from task" in log_lines(collector.poll(), "stdout"))
    assert supervisor.live_pids() == {task.key: tp.pid}
    supervisor.stop(task.key, grace=5)
    collector.wait_status(task.key, "stopped")
    assert collector.messages[-1]["exit_code"] == 0  # the task exits 0 on SIGTERM
    assert not pid_alive(tp.pid)


def test_stop_kills_whole_process_group_within_grace(
    supervisor: Supervisor, outbox: Outbox
) -> None:
    collector = Collector(outbox)
    task = fake_task(mode="grandchild")
    tp = supervisor.start(task)
    assert tp is not None
    line = wait_for(
        lambda: next(
            (x for x in log_lines(collector.poll(), "stdout") if x.startswith("GRANDCHILD ")), None
        ),
        what="grandchild pid",
    )
    grandchild = int(line.split()[1])
    try:
        assert pid_alive(grandchild) and os.getpgid(grandchild) == tp.pid
        grace = 1.0
        started = time.monotonic()
        supervisor.stop(task.key, grace=grace)
        # Both ignore SIGTERM, so SIGKILL after the grace period must take both.
        wait_for(
            lambda: not pid_alive(tp.pid) and not pid_alive(grandchild),
            grace + 1.0,
            "task and grandchild gone",
        )
        assert time.monotonic() - started >= grace * 0.9
        collector.wait_status(task.key, "stopped", timeout=3)
        final = collector.messages[-1]
        assert (final["exit_code"], final["message"]) == (137, "killed by SIGKILL")
    finally:
        cleanup_pid(grandchild)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "[]",
        '{"step": 1}',
        '{"values": 3}',
        '{"step": "x", "values": {"a": 1}}',
        '{"step": true, "values": {"a": 1}}',
        '{"step": 1, "values": {}}',
        "nan",
    ],
)
def test_parse_metric_line_rejects_malformed(line: str) -> None:
    assert parse_metric_line(line) == (None, [])


def test_parse_metric_line_accepts_report_output() -> None:
    when = "2025-01-01T00:00:00+00:00"
    point, dropped = parse_metric_line(f'{{"step": 3, "time": "{when}", "values": {{"acc": 1}}}}')
    assert dropped == []
    assert point == MetricPoint(values={"acc": 1.0}, step=3, time=datetime.fromisoformat(when))


def test_parse_metric_line_drops_values_the_protocol_refuses() -> None:
    """NaN and infinity are refused on the wire; the other values of the line still go."""
    line = '{"step": null, "time": "t", "values": {"loss": NaN, "x": Infinity, "ok": 2, "s": "a"}}'
    point, dropped = parse_metric_line(line)
    assert point is not None and point.values == {"ok": 2.0} and point.step is None
    assert point.time is not None and point.time.tzinfo is not None  # "t" is no time: now
    assert dropped == ["loss", "x", "s"]
    assert parse_metric_line('{"values": {"loss": NaN}}') == (None, ["loss"])


def test_cluster_file_follows_the_jobs_cluster(supervisor: Any, tmp_path: Path) -> None:
    first = '{"ps": ["h:1"], "worker": ["h:2"]}'
    task = fake_task(41, mode="serve", TRAINHUB_CLUSTER=first)
    supervisor.start(task)
    path = tmp_path / "tasks" / "41-1" / "run" / "cluster.json"
    assert path.read_text() == first
    assert not supervisor.update_cluster(task)  # unchanged: nothing written

    grown = '{"ps": ["h:1"], "worker": ["h:2", "h:3"]}'
    assert supervisor.update_cluster(fake_task(41, mode="serve", TRAINHUB_CLUSTER=grown))
    assert path.read_text() == grown
    assert not supervisor.update_cluster(fake_task(99, TRAINHUB_CLUSTER=grown))
    supervisor.stop(task.key, grace=2.0)


def test_stop_grace_is_the_latest_listings_own(supervisor: Supervisor) -> None:
    task = fake_task(51, mode="serve")
    supervisor.start(replace(task, stop_grace_seconds=60.0))
    assert supervisor.stop_grace(task.key, 5.0) == 60.0
    supervisor.update_stop_grace(replace(task, stop_grace_seconds=0.5))
    assert supervisor.stop_grace(task.key, 5.0) == 0.5
    supervisor.update_stop_grace(task)  # listed without one: the response-level value
    assert supervisor.stop_grace(task.key, 5.0) == 5.0
    assert supervisor.stop_grace(TaskKey(99, 1), 7.0) == 7.0  # not running


def test_a_full_outbox_holds_the_readers_back_and_nothing_is_dropped(tmp_path: Path) -> None:
    """The socket is down (nobody drains): output waits in the task's files instead of
    being dropped, and arrives whole and in order once draining resumes, status last."""
    outbox = Outbox(max_bytes=20_000)
    sup = Supervisor(outbox, tmp_path, cpus=NODE_CPUS, command=FAKE_COMMAND)
    lines = 5_000  # about 280 KB: 14 times the budget
    task = fake_task(mode="flood", TRAINHUB_FAKE_LINES=str(lines))
    try:
        sup.start(task)
        wait_for(lambda: not outbox.has_room(), 10, "the outbox to fill")
        time.sleep(1.0)  # the task has exited; the readers wait
        assert outbox.dropped_items == 0
        assert len(outbox) < 10  # a few batches, nowhere near the whole output
        assert sup.live_keys() == {task.key}  # no final status before all of its output
        collector = Collector(outbox)
        collector.wait_status(task.key, "succeeded", timeout=30)
    finally:
        sup.stop_all(grace=0.5)
    out = log_lines(collector.messages, "stdout")
    assert [line[:17] for line in out] == [f"flood line {i:06d}" for i in range(lines)]
    assert collector.messages[-1]["type"] == "task_status"
    assert outbox.dropped_items == 0


def test_a_task_without_a_run_directory_keeps_the_agent_going(
    supervisor: Any, tmp_path: Path
) -> None:
    """A task adopted from an agent before the sandbox has no run/ directory: a cluster
    change is logged, not written by name into the task's own directory."""
    task = fake_task(43, mode="serve", TRAINHUB_CLUSTER='{"ps": ["h:1"]}')
    started = supervisor.start(task)
    assert started is not None
    legacy = tmp_path / "legacy"
    started.cluster_file = legacy / "cluster.json"  # no such directory, as before the sandbox
    grown = fake_task(43, mode="serve", TRAINHUB_CLUSTER='{"ps": ["h:1", "h:2"]}')
    assert supervisor.update_cluster(grown) is False
    assert not legacy.exists()
    supervisor.stop(task.key, grace=2.0)
