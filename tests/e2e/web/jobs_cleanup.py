"""Jobs the web tests start on the shared services-mode cluster, and their cleanup: the
cluster (2 CPUs, recsys's quota) is shared by every end-to-end test of the session."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..cluster import LiveCluster

HALF = {"cpu": 0.5, "memory_mb": 512}
TERMINAL = {"succeeded", "failed", "cancelled"}


def small_spec(name: str, **overrides: Any) -> dict[str, Any]:
    """A movielens job of 1.5 CPUs (coordinator, one PS, one worker): two cannot both fit
    recsys's quota of 2 CPUs. It trains for long enough to be cancelled while running."""
    spec: dict[str, Any] = {
        "name": name,
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": 10000},
        "parameter_servers": {"replicas": 1, "resources": HALF},
        "workers": {"min": 1, "max": 1, "resources": HALF},
        "coordinator": {"resources": HALF},
    }
    spec.update(overrides)
    return spec


def end_jobs(cluster: LiveCluster, job_ids: list[int], timeout: float = 90) -> None:
    """Cancel the jobs and wait until they and all their tasks have ended."""
    for job_id in job_ids:
        if cluster.job(job_id)["state"] not in TERMINAL:
            cluster.api.post(f"/jobs/{job_id}/cancel/")
    deadline = time.monotonic() + timeout
    for job_id in job_ids:
        while True:
            job = cluster.job(job_id)
            if job["state"] in TERMINAL and all(
                t["state"] in ("succeeded", "failed", "stopped") for t in job["tasks"]
            ):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} has not ended: {job}")
            time.sleep(0.5)


@contextmanager
def ended_afterwards(cluster: LiveCluster) -> Iterator[list[int]]:
    """`with ended_afterwards(cluster) as started:` — every job id appended to `started`
    is cancelled and waited for at the end, whatever happened."""
    started: list[int] = []
    try:
        yield started
    finally:
        end_jobs(cluster, started)


def jobs_named(cluster: LiveCluster, name: str) -> list[dict[str, Any]]:
    """The jobs the admin can see whose name contains `name` (the API's own filter)."""
    return list(cluster.api.get("/jobs/", params={"name": name}).json()["results"])
