"""Each way a job can end, caused for real and labelled right on the job page and in the
API (issue 30, done-means 1), with what it cost in restarts.

A Python exception at start, an out-of-memory kill, a lost node, a preemption and a
failing environment build are here; a SIGKILL from outside is test_faults.py's killed
tasks, and the two stalls (a stopped worker, a deadlocked PS) are test_stalls.py's.
"""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from django.conf import settings

from tests.archive_builders import tar_gz
from tests.e2e.cluster import LiveCluster, second_agent

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
from .labels import record_labelled, wait_labelled

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RAISE_LINE = 7  # the line of `raise` below, which the hint must name
FAULT_CODE = b'''"""Jobs that fail on purpose (tests/faults/test_causes.py)."""


def raise_at_start(**_: object) -> None:
    """The same error at the same line on every attempt."""

    raise ValueError("learning_rate must be positive")


def allocate(mib: int = 4096, **_: object) -> None:
    """Hold ever more memory, written to, until the task's cgroup kills it."""
    held = []
    for _ in range(mib // 64):
        held.append(bytearray(b"x") * (64 << 20))
'''
SMALL = {"cpu": 0.25, "memory_mb": 512}


@pytest.fixture(scope="module")
def code(faults: FaultCluster) -> str:
    """The digest of an uploaded archive holding `FAULT_CODE` as `faultcode.py`."""
    archive = tar_gz({"faultcode.py": FAULT_CODE})
    response = faults.cluster.api.post(
        "/code/", files={"file": ("faultcode.tar.gz", io.BytesIO(archive))}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["digest"])


def _failing(name: str, entrypoint: str, code: str, **extra: Any) -> dict[str, Any]:
    spec = {
        **movielens(name),
        "entrypoint": entrypoint,
        "args": {},
        "code": code,
        "parameter_servers": {"replicas": 1, "resources": SMALL},
        "workers": {"min": 1, "max": 1, "resources": SMALL},
        "coordinator": {"resources": SMALL},
    }
    return {**spec, **extra}


def _tasks(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{t['role']}-{t['index']}": t for t in job["tasks"]}


def test_an_exception_at_start_fails_the_job_after_two_attempts(
    faults: FaultCluster, web: httpx.Client, code: str
) -> None:
    """(a) The same exception at the same line twice in a row: the default retry policy
    does not spend the rest of max_restarts on it."""
    cluster, t0 = faults.cluster, time.monotonic()
    spec = _failing("cause-exception", "faultcode:raise_at_start", code, max_restarts=3)
    job_id = cluster.submit(**spec)["id"]
    done = cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=180)
    assert done["state"] == "failed", cluster.logs(job_id)
    job, page = wait_labelled(cluster, web, job_id, "user_exception", task="coordinator-0")
    where = f"ValueError: learning_rate must be positive at faultcode.py:{RAISE_LINE}"
    assert where in job["end_hint"], job["end_hint"]
    assert where in page.reason, page
    assert _tasks(job)["coordinator-0"]["attempt"] == 2, job["tasks"]
    assert job["restarts"] == 1
    assert restart_count(cluster.api, job_id) == 1
    no_processes_left(cluster, job_id)
    record_labelled("exception at start", "user_exception", job, resumed_at=0, since=t0)


def test_an_out_of_memory_kill(faults: FaultCluster, web: httpx.Client, code: str) -> None:
    """(b) The coordinator outgrows its 256 MiB: its cgroup's OOM killer ends it."""
    cluster, t0 = faults.cluster, time.monotonic()
    spec = _failing(
        "cause-oom",
        "faultcode:allocate",
        code,
        max_restarts=0,
        coordinator={"resources": {"cpu": 0.25, "memory_mb": 256}},
    )
    job_id = cluster.submit(**spec)["id"]
    done = cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=180)
    assert done["state"] == "failed", cluster.logs(job_id)
    job, page = wait_labelled(cluster, web, job_id, "out_of_memory", task="coordinator-0")
    hint = "the task used more than its 256 MiB: raise coordinator.resources.memory_mb"
    assert hint in job["end_hint"] and hint in page.reason, (job["end_hint"], page)
    assert restart_count(cluster.api, job_id) == 0
    no_processes_left(cluster, job_id)
    record_labelled("out of memory", "out_of_memory", job, resumed_at=0, since=t0)


def _node_id(cluster: LiveCluster, hostname: str) -> int:
    nodes = cluster.api.get("/nodes/").json()["results"]
    return int(next(n["id"] for n in nodes if n["hostname"] == hostname))


def _wait_alive(cluster: LiveCluster, hostname: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = cluster.api.get("/nodes/").json()["results"]
        if any(n["hostname"] == hostname and n["alive"] for n in nodes):
            return
        time.sleep(0.5)
    raise AssertionError(f"node {hostname} did not come back")


@pytest.fixture
def node_2(faults: FaultCluster) -> Iterator[str]:
    """A second agent's node, cordoned until the case wants it; afterwards cordoned again
    and its agent stopped, so that later cases run on the first node alone."""
    cluster = faults.cluster
    node = second_agent(cluster, faults.tmp)
    assert cluster.api.post(f"/nodes/{node['id']}/cordon/").is_success
    try:
        yield str(node["hostname"])
    finally:
        cluster.api.post(f"/nodes/{node['id']}/cordon/")
        cluster.group.stop(names=["agent2"])


def test_a_lost_node_restarts_the_job_on_another_without_spending_max_restarts(
    faults: FaultCluster, web: httpx.Client, node_2: str
) -> None:
    """(d) The node running the job goes dark (its agent and its tasks SIGKILLed, kept
    down): once the platform declares it lost, the job restarts on the other node from
    its checkpoint, from the infrastructure's budget (`infra_restarts`)."""
    cluster, t0 = faults.cluster, time.monotonic()
    agent = cluster.group.procs["agent"]
    command = [str(a) for a in agent.args]  # type: ignore[union-attr]
    job_id = cluster.submit(**movielens("cause-node-lost", epochs=8))["id"]
    lost = ""
    try:
        with Watch(cluster, job_id) as watch:
            wait_epochs(cluster.api, job_id, 2)
            (lost,) = {t["node"] for t in cluster.job(job_id)["tasks"]}
            assert cluster.api.post(f"/nodes/{_node_id(cluster, node_2)}/uncordon/").is_success
            fault_at = datetime.now(UTC)
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
            victims = processes(cluster, job_id)  # the machine is gone, its tasks with it
            assert victims, f"no process of job {job_id}"
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            timeout = settings.NODE_LOST_AFTER_SECONDS + 60
            wait_labelled(cluster, web, job_id, "node_lost", timeout=timeout)
            done = cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=240)
        assert done["state"] == "succeeded", cluster.logs(job_id)
    finally:
        if agent.poll() is not None:  # the first node comes back for the cases after this
            cluster.group.start("agent", command)
            _wait_alive(cluster, lost)
    watch.check()
    assert {t["node"] for t in done["tasks"]} == {node_2} != {lost}
    trained_on(cluster.api, job_id, fault_at)
    assert done["restarts"] == 0 and done["infra_restarts"] == 1, done
    assert restart_count(cluster.api, job_id) == 1
    step = check_resumed(cluster.api, job_id, resumed=True)
    no_processes_left(cluster, job_id)
    record_labelled("lost node", "node_lost", done, resumed_at=step, since=t0)


def _team_without_quota(api: httpx.Client, slug: str) -> None:
    if api.get(f"/teams/{slug}/").status_code == 404:
        created = api.post("/teams/", json={"slug": slug, "name": slug.title()})
        assert created.status_code == 201, created.text
    assert api.put(f"/teams/{slug}/quota/", json={"cpu": 0, "memory_mb": 0, "gpu": 0}).is_success


def test_a_preempted_borrower(faults: FaultCluster, web: httpx.Client) -> None:
    """(e) A job on quota borrowed from `recsys` is preempted when recsys needs it back;
    it checkpoints, waits, and resumes from its checkpoint. No restart is spent."""
    cluster, t0 = faults.cluster, time.monotonic()
    _team_without_quota(cluster.api, "lab")
    spec = {**movielens("cause-preempted", team="lab"), "priority": "experiment"}
    job_id = cluster.submit(**spec)["id"]
    with Watch(cluster, job_id) as watch:
        wait_epochs(cluster.api, job_id, 2)
        assert {t["borrowed"] for t in cluster.job(job_id)["tasks"]} == {True}
        fault_at = datetime.now(UTC)
        owner = cluster.submit(**movielens("cause-preempting", epochs=3))["id"]
        job, page = wait_labelled(cluster, web, job_id, "preempted", task="coordinator-0")
        assert job["state"] in ("preempted", "pending") and page.state == job["state"]
        done = cluster.wait_state(owner, {"succeeded", "failed"}, timeout=180)
        assert done["state"] == "succeeded", cluster.logs(owner)
        done = cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=240)
    assert done["state"] == "succeeded", cluster.logs(job_id)
    watch.check()
    trained_on(cluster.api, job_id, fault_at)
    assert done["preemptions"] == 1 and restart_count(cluster.api, job_id) == 0
    step = check_resumed(cluster.api, job_id, resumed=True)
    no_processes_left(cluster, job_id)
    record_labelled("preemption", "preempted", done, resumed_at=step, since=t0)


def test_a_failing_environment_build(faults: FaultCluster, web: httpx.Client) -> None:
    """(f) A requirement no index has (the node's is an empty wheelhouse): the job fails
    at once, since any node would fail the same way."""
    cluster, t0 = faults.cluster, time.monotonic()
    missing = "trainhub-fault-missing==1.0"
    spec = {**movielens("cause-environment"), "environment": {"requirements": [missing]}}
    job_id = cluster.submit(**spec)["id"]
    done = cluster.wait_state(job_id, {"succeeded", "failed"}, timeout=180)
    assert done["state"] == "failed", cluster.logs(job_id)
    job, page = wait_labelled(cluster, web, job_id, "environment_failed")
    assert "could not start" in page.reason and "environment_failed" in page.task_causes
    assert job["restarts"] == 0 and restart_count(cluster.api, job_id) == 0
    no_processes_left(cluster, job_id)
    record_labelled("environment build", "environment_failed", job, resumed_at=0, since=t0)
