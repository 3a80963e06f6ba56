"""An ASHA experiment in services mode: trials are jobs, and a promoted trial resumes
from its own checkpoint (its epochs continue the count)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from .cluster import LiveCluster
from .test_services_mode import movielens_spec

pytestmark = [pytest.mark.services, pytest.mark.slow]


def wait_experiment(cluster: LiveCluster, pk: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = dict(cluster.api.get(f"/experiments/{pk}/").raise_for_status().json())
        if body["state"] in ("succeeded", "failed", "cancelled"):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(
                f"experiment {pk} still {body['state']}: {json.dumps(body)[:3000]}"
            )
        time.sleep(1)


def epochs_of(cluster: LiveCluster, job_id: int) -> list[float]:
    series = cluster.api.get(f"/jobs/{job_id}/metrics/").json()["series"]
    return [p["value"] for p in series.get("epoch", [])]


def test_asha_promotes_the_best_trial_which_resumes_from_its_checkpoint(
    live_cluster: LiveCluster,
) -> None:
    body = {
        **movielens_spec("asha-e2e", {"dim": 8}),
        "retry": {"backoff_seconds": 0},
        "search": {
            "method": "asha",
            "metric": "test_rmse",
            "max_trials": 3,
            "max_concurrent": 1,
            "min_budget": 1,
            "max_budget": 3,
            "reduction_factor": 3,
            "params": {"lr": {"type": "categorical", "values": [0.003, 0.05, 0.2]}},
        },
    }
    response = live_cluster.api.post("/experiments/", json=body)
    assert response.status_code == 201, response.text
    done = wait_experiment(live_cluster, response.json()["id"], timeout=420)
    assert done["state"] == "succeeded", json.dumps(done)[:3000]

    trials = {t["number"]: t for t in done["trials"]}
    assert sorted(t["state"] for t in trials.values()) == ["completed", "stopped", "stopped"]
    (promoted,) = [t for t in trials.values() if t["state"] == "completed"]
    assert promoted["rung"] == 1 and done["best_trial"] == promoted["number"]
    first, second = promoted["jobs"]
    # The first run trained epoch 1; the promoted run restored it and trained 2 and 3.
    assert epochs_of(live_cluster, first) == [1.0]
    assert epochs_of(live_cluster, second) == [2.0, 3.0]
    assert set(promoted["results"]) == {"0", "1"}
    assert promoted["results"]["1"] < promoted["results"]["0"]
    for t in trials.values():
        if t["state"] == "stopped":
            assert len(t["jobs"]) == 1 and epochs_of(live_cluster, t["jobs"][0]) == [1.0]
