"""Stalls caused for real (issue 30, done-means 1, causes (g) and (h)): a worker stopped
with SIGSTOP, and a parameter server deadlocked in a call (SIGSTOP while the job's
calls are in flight to it). Neither process ends, so only progress tells: the job shows
`stalled`, and after the spec's grace the platform restarts it from its checkpoint,
labelled `stalled` on the job page and in the API, from the infrastructure's budget."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.e2e.cluster import LiveCluster

from .conftest import FaultCluster
from .harness import (
    Watch,
    check_resumed,
    movielens,
    no_processes_left,
    processes,
    restart_count,
    trained_on,
    wait_epochs,
)
from .labels import job_page, record_labelled, wait_labelled

pytestmark = [pytest.mark.faults, pytest.mark.slow]

# Stalled after 2 x the job's p95 step interval, but never under 10 s; restarted 5 s later.
STALL = {"k": 2, "floor_seconds": 10, "grace_seconds": 5, "on_stall": "restart"}
DETECTED_WITHIN_S = 10 + 30  # the floor, plus done-means 2's 30 s


def task_pids(cluster: LiveCluster, job_id: int, role: str) -> list[int]:
    """Every live process of the job's `role` task: its wrapper, sandbox and Python."""
    want = f"TRAINHUB_ROLE={role}".encode()
    pids = []
    for pid in processes(cluster, job_id):
        try:
            if want in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                pids.append(pid)
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue
    return pids


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """The pids a case stopped; continued afterwards, whatever the platform did."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            continue


def _wait_shown_stalled(
    cluster: LiveCluster, web: httpx.Client, job_id: int, timeout: float
) -> float:
    """The job shows `stalled`: in the API (`stalled_at`) and on its page (beside its
    state). Returns when the API first said so (monotonic)."""
    deadline = time.monotonic() + timeout
    while not cluster.job(job_id)["stalled_at"]:
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} not stalled after {timeout} s")
        time.sleep(0.3)
    seen = time.monotonic()
    page = job_page(web, job_id)
    assert page.stalled and page.state == "running", page
    return seen


@pytest.mark.parametrize("role", ["worker", "ps"])
def test_a_stopped_task_is_a_stall_and_the_job_restarts_from_its_checkpoint(
    faults: FaultCluster, web: httpx.Client, stopped: list[int], role: str
) -> None:
    """(g) worker: SIGSTOP on every process of the worker task. (h) ps: the same on the
    parameter server, whose callers then wait in their calls for ever."""
    cluster, started = faults.cluster, time.monotonic()
    job_id = cluster.submit(**movielens(f"stall-{role}", epochs=8), stall=STALL)["id"]
    with Watch(cluster, job_id) as watch:
        wait_epochs(cluster.api, job_id, 3)
        pids = task_pids(cluster, job_id, role)
        assert pids, f"no live {role} of job {job_id}"
        fault_at, t0 = datetime.now(UTC), time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        detected = _wait_shown_stalled(cluster, web, job_id, DETECTED_WITHIN_S) - t0
        wait_labelled(cluster, web, job_id, "stalled", timeout=60)
        done = cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=240)
    assert done["state"] == "succeeded", cluster.logs(job_id)
    trained_on(cluster.api, job_id, fault_at)
    watch.check()
    assert done["restarts"] == 0, done  # a stall is not the job's code's fault
    assert restart_count(cluster.api, job_id) == 1
    step = check_resumed(cluster.api, job_id, resumed=True)
    no_processes_left(cluster, job_id)
    case = f"SIGSTOP {role} (seen {detected:.0f} s)"
    record_labelled(case, "stalled", done, resumed_at=step, since=started)
