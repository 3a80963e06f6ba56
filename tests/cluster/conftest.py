"""One production-like cluster for the whole package (tests/cluster/harness.py): the tests
share it in file order and each leaves it as it found it (every process up)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.harness import Cluster, production_cluster

TERMINAL = {"succeeded", "failed", "cancelled"}
ONE_CPU = {"cpu": 1.0, "memory_mb": 512}
HALF_CPU = {"cpu": 0.5, "memory_mb": 512}


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with production_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def movielens(name: str, epochs: int, **extra: Any) -> dict[str, Any]:
    """A MovieLens job of one server, one worker and the coordinator, half a CPU each."""
    return {
        "name": name,
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": epochs},
        "parameter_servers": {"replicas": 1, "resources": HALF_CPU},
        "workers": {"min": 1, "max": 1, "resources": HALF_CPU},
        "coordinator": {"resources": HALF_CPU},
        **extra,
    }


def submit(cluster: Cluster, spec: dict[str, Any]) -> dict[str, Any]:
    response = cluster.api.post("/api/v1/jobs/", json=spec)
    assert response.status_code == 201, response.text
    return dict(response.json())


def job(cluster: Cluster, job_id: int) -> dict[str, Any]:
    return dict(cluster.api.get(f"/api/v1/jobs/{job_id}/").raise_for_status().json())


def wait_state(cluster: Cluster, job_id: int, states: set[str], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        current = job(cluster, job_id)
        if current["state"] in states:
            return current
        assert time.monotonic() < deadline, f"job {job_id} still {current['state']}: {current}"
        time.sleep(0.5)


def wait_metric(cluster: Cluster, job_id: int, name: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        series = cluster.api.get(f"/api/v1/jobs/{job_id}/metrics/").json()["series"]
        if len(series.get(name, [])) >= count:
            return
        assert time.monotonic() < deadline, f"job {job_id} has {series.get(name)} of {name}"
        time.sleep(0.5)


def submit_on(cluster: Cluster, host: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit `spec` and have it placed on `host` alone: the other nodes are cordoned until
    it is placed. (Each host keeps its checkpoints on storage of its own, see Host.)"""
    others = [n["id"] for name, n in cluster.nodes().items() if name != host]
    for node in others:
        cluster.api.post(f"/api/v1/nodes/{node}/cordon/").raise_for_status()
    try:
        job = submit(cluster, spec)
        placed = {"starting", "running", *TERMINAL}
        wait_state(cluster, job["id"], placed, timeout=120)
    finally:
        for node in others:
            cluster.api.post(f"/api/v1/nodes/{node}/uncordon/").raise_for_status()
    return job
