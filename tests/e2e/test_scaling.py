"""Scaling a running job through the API: a worker joins the coordinator, leaves again,
and the job finishes with every step done (services mode, real processes)."""

from __future__ import annotations

import json
import time

import pytest

from .cluster import LiveCluster
from .test_recovery import _wait_metric
from .test_services_mode import SMALL

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _wait_log(cluster: LiveCluster, job_id: int, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = cluster.api.get(f"/jobs/{job_id}/logs/").json()["lines"]
        if any(text in line["line"] for line in lines):
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never logged {text!r}:\n{cluster.logs(job_id)}")


def test_scale_up_and_down_while_training(live_cluster: LiveCluster) -> None:
    job = live_cluster.submit(
        name="elastic-e2e",
        team="recsys",
        entrypoint="ps_runtime.examples.movielens:train",
        args={"epochs": 30},
        parameter_servers={"replicas": 1, "resources": SMALL},
        workers={"min": 1, "max": 2, "resources": SMALL},
        coordinator={"resources": SMALL},
    )
    _wait_metric(live_cluster, job["id"], "test_rmse", 2)

    assert live_cluster.api.post(f"/jobs/{job['id']}/scale/", json={"workers": 2}).is_success
    _wait_log(live_cluster, job["id"], "worker 1 at")  # "... joined"
    tasks = live_cluster.job(job["id"])["tasks"]
    assert sum(t["role"] == "worker" and t["desired"] == "run" for t in tasks) == 2

    assert live_cluster.api.post(f"/jobs/{job['id']}/scale/", json={"workers": 1}).is_success
    _wait_log(live_cluster, job["id"], "left")

    done = live_cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=300)
    assert done["state"] == "succeeded", live_cluster.logs(job["id"])
    lines = live_cluster.api.get(f"/jobs/{job['id']}/logs/").json()["lines"]
    result = next(
        json.loads(x["line"])["result"] for x in lines if x["line"].startswith('{"result"')
    )
    assert result["completed_steps"] == result["steps"]
    events = live_cluster.api.get(f"/jobs/{job['id']}/events/").json()
    assert [e["reason"] for e in events if e["kind"] == "rescale"] == [
        "workers 1 -> 2",
        "workers 2 -> 1",
    ]
