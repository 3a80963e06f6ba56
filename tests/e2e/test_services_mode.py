"""The whole path in services mode: API → scheduler (Celery) → agent → PS runtime → metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .cluster import LiveCluster, describe_processes, job_processes, movielens_file

pytestmark = [pytest.mark.services, pytest.mark.slow]

SMALL = {"cpu": 0.5, "memory_mb": 1024}


def movielens_spec(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": args,
        "parameter_servers": {"replicas": 1, "resources": SMALL},
        "workers": {"min": 1, "max": 1, "resources": SMALL},
        "coordinator": {"resources": SMALL},
    }


def test_movielens_job_trains_to_success(live_cluster: LiveCluster, tmp_path: Path) -> None:
    data = movielens_file(tmp_path)
    job = live_cluster.submit(**movielens_spec("mf-e2e", {"data": str(data), "epochs": 5}))
    assert job["state"] == "pending"
    done = live_cluster.wait_state(job["id"], {"succeeded", "failed", "cancelled"}, timeout=300)
    assert done["state"] == "succeeded", live_cluster.logs(job["id"])

    series = live_cluster.api.get(f"/jobs/{job['id']}/metrics/").json()["series"]
    rmse = [p["value"] for p in series["test_rmse"]]
    assert len(rmse) == 5
    assert rmse[-1] < 0.98, rmse
    assert series["train_loss"], "train_loss was never reported"

    events = live_cluster.api.get(f"/jobs/{job['id']}/events/").json()
    assert [e["to_state"] for e in events if e["kind"] == "state"] == [
        "starting",
        "running",
        "succeeded",
    ]
    roles = {(t["role"], t["state"]) for t in done["tasks"]}
    assert ("coordinator", "succeeded") in roles
    # PS and worker are stopped by the agent once the job is over.
    deadline = time.monotonic() + 15
    while job_processes(job["id"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job_processes(job["id"]) == []


def test_cancel_stops_every_process_within_10_s(live_cluster: LiveCluster, tmp_path: Path) -> None:
    job = live_cluster.submit(**movielens_spec("long-e2e", {"epochs": 10000}))
    live_cluster.wait_state(job["id"], {"running"}, timeout=120)
    deadline = time.monotonic() + 30
    while len(job_processes(job["id"])) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(job_processes(job["id"])) >= 3

    started = time.monotonic()
    response = live_cluster.api.post(f"/jobs/{job['id']}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    while job_processes(job["id"]) and time.monotonic() - started < 20:
        time.sleep(0.1)
    elapsed = time.monotonic() - started
    left = job_processes(job["id"])
    assert left == [], f"processes survived the cancel:\n{describe_processes(left)}"
    assert elapsed <= 10, f"stopping took {elapsed:.1f} s"

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        tasks = live_cluster.job(job["id"])["tasks"]
        if all(t["state"] == "stopped" for t in tasks):
            break
        time.sleep(0.3)
    assert {t["state"] for t in live_cluster.job(job["id"])["tasks"]} == {"stopped"}
