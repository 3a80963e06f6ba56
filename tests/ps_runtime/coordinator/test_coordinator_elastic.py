"""Coordinator semantics with workers and PS shards as real processes: elastic membership,
at-least-once delivery when a worker is SIGKILLed, worker affinity, and PS failure."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.cluster_coordinator import (
    ClusterCoordinator,
    ScheduleOption,
    UnavailableError,
)
from ps_runtime.coordinator.strategy import ParameterServerStrategy
from tests.ps_runtime import closure_fns

TOKEN = "elastic-test-token"
REPO = Path(__file__).resolve().parents[3]


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class Tasks:
    """PS and worker processes started with the task protocol's environment."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, role: str, index: int = 0, address: str | None = None) -> str:
        address = address or _free_address()
        env = dict(
            os.environ,
            TRAINHUB_ROLE=role,
            TRAINHUB_TASK_INDEX=str(index),
            TRAINHUB_BIND=address,
            TRAINHUB_JOB_TOKEN=TOKEN,
            PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        )
        self.procs[address] = subprocess.Popen(
            [sys.executable, "-m", "ps_runtime.task"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return address

    def kill(self, address: str) -> None:
        self.procs[address].send_signal(signal.SIGKILL)
        self.procs[address].wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def tasks() -> Iterator[Tasks]:
    t = Tasks()
    yield t
    t.stop_all()


def _coordinator(ps: list[str], workers: list[str], **kwargs: int) -> ClusterCoordinator:
    resolver = ClusterResolver(ps=ps, workers=workers, token=TOKEN)
    resolver.wait_until_healthy(timeout=60)
    return ClusterCoordinator(ParameterServerStrategy(resolver), **kwargs)


def _rate(coordinator: ClusterCoordinator, n: int, seconds: float) -> float:
    start = time.perf_counter()
    values = [coordinator.schedule(closure_fns.slow_identity, (i, seconds)) for i in range(n)]
    coordinator.join()
    assert [v.fetch() for v in values] == list(range(n))
    return n / (time.perf_counter() - start)


def test_adding_a_worker_raises_throughput_and_removing_one_loses_nothing(
    tasks: Tasks,
) -> None:
    ps, first = tasks.start("ps"), tasks.start("worker")
    coordinator = _coordinator([ps], [first], max_in_flight_per_worker=1)
    try:
        before = _rate(coordinator, 20, 0.05)
        second = tasks.start("worker", 1)
        ClusterResolver(ps=[ps], workers=[second], token=TOKEN).wait_until_healthy(60)
        index = coordinator.add_worker(second)
        after = _rate(coordinator, 40, 0.05)
        assert after > 1.5 * before, (before, after)

        values = [coordinator.schedule(closure_fns.slow_identity, (i, 0.05)) for i in range(40)]
        time.sleep(0.3)
        coordinator.remove_worker(index)
        assert coordinator.workers == {0: first}
        coordinator.join()
        assert [v.fetch() for v in values] == list(range(40))
    finally:
        coordinator.shutdown()


def test_sigkilled_worker_closures_run_again_elsewhere(tasks: Tasks, tmp_path: Path) -> None:
    ps = tasks.start("ps")
    workers = [tasks.start("worker", i) for i in range(2)]
    coordinator = _coordinator([ps], workers)
    log = tmp_path / "runs.txt"
    try:
        values = [coordinator.schedule(closure_fns.record, (str(log), i, 0.05)) for i in range(60)]
        time.sleep(0.6)
        tasks.kill(workers[1])
        coordinator.join(timeout=120)
        results = [v.fetch() for v in values]
    finally:
        coordinator.shutdown()
    assert [r["id"] for r in results] == list(range(60))
    runs = [int(line.split()[0]) for line in log.read_text().splitlines()]
    assert set(runs) == set(range(60)), "a closure was lost"
    survivor = tasks.procs[workers[0]].pid
    assert any(r["pid"] == survivor for r in results)


def test_bound_closure_runs_on_its_worker_or_fails_clearly(tasks: Tasks) -> None:
    ps = tasks.start("ps")
    workers = [tasks.start("worker", i) for i in range(2)]
    coordinator = _coordinator([ps], workers)
    try:
        pid = coordinator.schedule(closure_fns.worker_pid, options=ScheduleOption(worker=1)).fetch(
            timeout=30
        )
        assert pid == tasks.procs[workers[1]].pid
        with pytest.raises(ValueError, match="no worker 7"):
            coordinator.schedule(closure_fns.worker_pid, options=ScheduleOption(worker=7))

        tasks.kill(workers[1])
        bound = coordinator.schedule(
            closure_fns.worker_pid, options=ScheduleOption(worker=1, timeout=2.0)
        )
        free = coordinator.schedule(closure_fns.worker_pid)
        with pytest.raises(UnavailableError, match="bound to worker 1"):
            bound.fetch(timeout=30)
        assert free.fetch(timeout=30) == tasks.procs[workers[0]].pid
    finally:
        coordinator.shutdown()


def test_dead_parameter_server_is_named(tasks: Tasks) -> None:
    ps = [tasks.start("ps", i) for i in range(2)]
    worker = tasks.start("worker")
    resolver = ClusterResolver(ps=ps, workers=[worker], token=TOKEN)
    resolver.wait_until_healthy(timeout=60)
    strategy = ParameterServerStrategy(resolver)
    coordinator = ClusterCoordinator(strategy)
    try:
        with strategy.scope():
            table = strategy.create_table("t", 4)
        grads = np.ones((4, 4), dtype=np.float32)
        coordinator.schedule(closure_fns.push_rows, (table, [0, 1, 2, 3], grads)).fetch(30)
        tasks.kill(ps[1])
        failed = coordinator.schedule(closure_fns.push_rows, (table, [0, 1, 2, 3], grads))
        with pytest.raises(UnavailableError, match=f"parameter server 1 at {ps[1]}"):
            failed.fetch(timeout=60)
        with pytest.raises(UnavailableError, match="parameter server 1"):
            coordinator.join(timeout=60)
    finally:
        coordinator.shutdown()
        strategy.close()


def test_coordinator_follows_the_cluster_file(
    tasks: Tasks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    ps, first, second = tasks.start("ps"), tasks.start("worker"), tasks.start("worker", 1)
    ClusterResolver(ps=[ps], workers=[second], token=TOKEN).wait_until_healthy(60)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"ps": [ps], "worker": [first]}))
    monkeypatch.setenv("TRAINHUB_CLUSTER_FILE", str(path))
    coordinator = _coordinator([ps], [first])
    try:

        def wait_workers(expected: set[str]) -> None:
            deadline = time.monotonic() + 15
            while set(coordinator.workers.values()) != expected:
                assert time.monotonic() < deadline, coordinator.workers
                time.sleep(0.1)

        time.sleep(1.1)  # a new mtime for the rewrite
        path.write_text(json.dumps({"ps": [ps], "worker": [first, second]}))
        wait_workers({first, second})
        values = [coordinator.schedule(closure_fns.slow_identity, (i, 0.02)) for i in range(30)]
        time.sleep(1.1)
        path.write_text(json.dumps({"ps": [ps], "worker": [second]}))
        wait_workers({second})
        coordinator.join(timeout=60)
        assert [v.fetch() for v in values] == list(range(30))
    finally:
        coordinator.shutdown()


def test_a_worker_added_before_it_serves_is_waited_for_without_a_warning(
    tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    """A scale-up names the new worker as soon as it is placed, before its process serves:
    routine, so the coordinator waits for it and says so at INFO, and no closure fails."""
    ps, first = tasks.start("ps"), tasks.start("worker")
    coordinator = _coordinator([ps], [first], max_in_flight_per_worker=1)
    try:
        second = _free_address()
        with caplog.at_level("INFO", logger="ps_runtime.coordinator"):
            coordinator.add_worker(second)  # nothing listens there yet
            values = [coordinator.schedule(closure_fns.slow_identity, (i, 0.05)) for i in range(20)]
            time.sleep(1.0)
            tasks.start("worker", 1, second)  # its process starts a while after
            coordinator.join(timeout=60)
            deadline = time.monotonic() + 60
            while not any(f"worker 1 at {second} is serving" in m for m in caplog.messages):
                assert time.monotonic() < deadline, caplog.messages
                time.sleep(0.2)
        assert [v.fetch() for v in values] == list(range(20))
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
    finally:
        coordinator.shutdown()
