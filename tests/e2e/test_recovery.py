"""Jobs that lose a process keep going: a killed worker is relaunched alone, a killed PS
restarts the job from its last checkpoint (services mode, real processes)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from .cluster import LiveCluster, task_pid
from .test_services_mode import movielens_spec

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _wait_metric(
    cluster: LiveCluster, job_id: int, name: str, count: int, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        series = cluster.api.get(f"/jobs/{job_id}/metrics/").json()["series"]
        if len(series.get(name, [])) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never reported {count} points of {name}")


def _kill(job_id: int, role: str) -> None:
    pid = task_pid(job_id, role)
    assert pid is not None, f"no live {role} process for job {job_id}"
    os.kill(pid, signal.SIGKILL)


def _events(cluster: LiveCluster, job_id: int) -> list[dict[str, Any]]:
    return list(cluster.api.get(f"/jobs/{job_id}/events/").json())


def test_killed_worker_is_relaunched_and_the_job_succeeds(live_cluster: LiveCluster) -> None:
    job = live_cluster.submit(**movielens_spec("worker-loss", {"epochs": 12}), max_restarts=2)
    _wait_metric(live_cluster, job["id"], "test_rmse", 2)
    _kill(job["id"], "worker")
    done = live_cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=240)
    assert done["state"] == "succeeded", live_cluster.logs(job["id"])
    restarts = [e for e in _events(live_cluster, job["id"]) if e["kind"] == "restart"]
    assert len(restarts) == 1 and "relaunching it" in restarts[0]["reason"]
    worker = next(t for t in done["tasks"] if t["role"] == "worker")
    assert worker["attempt"] == 2
    series = live_cluster.api.get(f"/jobs/{job['id']}/metrics/").json()["series"]
    assert len(series["test_rmse"]) == 12


def test_killed_ps_restarts_the_job_from_its_checkpoint(live_cluster: LiveCluster) -> None:
    spec = movielens_spec("ps-loss", {"epochs": 12})
    job = live_cluster.submit(**spec, max_restarts=2, checkpoint_every_seconds=0)
    _wait_metric(live_cluster, job["id"], "test_rmse", 3)
    _kill(job["id"], "ps")
    done = live_cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=240)
    assert done["state"] == "succeeded", live_cluster.logs(job["id"])
    states = [e["to_state"] for e in _events(live_cluster, job["id"]) if e["kind"] == "state"]
    assert states == ["starting", "running", "restarting", "running", "succeeded"]
    logs = live_cluster.api.get(f"/jobs/{job['id']}/logs/").json()["lines"]
    assert any("resumed from checkpoint" in line["line"] for line in logs)
    assert {t["attempt"] for t in done["tasks"]} == {2}


def _replicated_spec(name: str) -> dict[str, Any]:
    spec = movielens_spec(name, {"epochs": 10, "seed": 3})
    # Three servers fit the team's 2 CPUs beside the coordinator and the worker.
    small = {"cpu": 0.25, "memory_mb": 512}
    spec["parameter_servers"] = {"replicas": 3, "replication": 1, "resources": small}
    return spec


def _final_rmse(cluster: LiveCluster, job_id: int) -> float:
    series = cluster.api.get(f"/jobs/{job_id}/metrics/").json()["series"]
    assert len(series["test_rmse"]) == 10
    return float(series["test_rmse"][-1]["value"])


def test_a_killed_ps_of_a_replicated_job_is_replaced_while_it_runs(
    live_cluster: LiveCluster,
) -> None:
    clean = live_cluster.submit(**_replicated_spec("ps-replicated-clean"), max_restarts=2)
    done = live_cluster.wait_state(clean["id"], {"succeeded", "failed"}, timeout=300)
    assert done["state"] == "succeeded", live_cluster.logs(clean["id"])

    job = live_cluster.submit(**_replicated_spec("ps-replicated"), max_restarts=2)
    _wait_metric(live_cluster, job["id"], "test_rmse", 3)
    _kill(job["id"], "ps")  # server 0: the primary of shard 0
    done = live_cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=300)
    assert done["state"] == "succeeded", live_cluster.logs(job["id"])
    states = [e["to_state"] for e in _events(live_cluster, job["id"]) if e["kind"] == "state"]
    assert states == ["starting", "running", "succeeded"]  # never restarting
    restarts = [e for e in _events(live_cluster, job["id"]) if e["kind"] == "restart"]
    assert len(restarts) == 1 and "copies its shards" in restarts[0]["reason"]
    attempts = {(t["role"], t["index"]): t["attempt"] for t in done["tasks"]}
    assert attempts[("ps", 0)] == 2 and attempts[("coordinator", 0)] == 1
    logs = live_cluster.api.get(f"/jobs/{job['id']}/logs/").json()["lines"]
    assert not any("resumed from checkpoint" in line["line"] for line in logs)
    assert (
        abs(_final_rmse(live_cluster, job["id"]) - _final_rmse(live_cluster, clean["id"])) <= 0.01
    )
