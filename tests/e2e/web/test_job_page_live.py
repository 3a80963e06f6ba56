"""The job page follows its job without a reload (services mode): opened while the job
waits (its one node cordoned), it fills in Started, then Finished and the Result as the
job runs to success; for a job whose worker keeps dying, its restart count climbs to the
spec's max_restarts and the failure's message says the same number. No "None" shows."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from ...archive_builders import MYMODEL, tar_gz
from ..browser import assert_accessible
from ..cluster import LiveCluster
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

TERMINAL = {"succeeded", "failed", "cancelled"}
SMALL = {"cpu": 0.5, "memory_mb": 1024}
# A worker closure that kills its own process: the worker is relaunched (a restart) and
# gets the closure again, until the job is out of restarts. A signal, not an exit status,
# so that the node's quarantine (tasks failing at start) takes no note of it.
CRASHY = b"""import os
import signal
import time

from ps_runtime.coordinator.cluster import ClusterResolver
from ps_runtime.coordinator.cluster_coordinator import ClusterCoordinator
from ps_runtime.coordinator.strategy import ParameterServerStrategy


def crash() -> None:
    time.sleep(2)  # long enough for the page to show each restart
    os.kill(os.getpid(), signal.SIGKILL)


def train() -> None:
    strategy = ParameterServerStrategy(ClusterResolver())
    coordinator = ClusterCoordinator(strategy)
    try:
        coordinator.schedule(crash).fetch()
    finally:
        coordinator.shutdown()
        strategy.close()
"""
# Every value #job-restarts showed, in order (a MutationObserver's record).
WATCH_RESTARTS = """() => {
  const el = document.getElementById("job-restarts");
  window.__restarts = [el.textContent];
  new MutationObserver(() => window.__restarts.push(el.textContent))
    .observe(el, {childList: true, characterData: true, subtree: true});
  window.__notReloaded = true;
}"""


def _spec(name: str, module: str, digest: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "team": "recsys",
        "entrypoint": f"{module}:train",
        "code": digest,
        "parameter_servers": {"replicas": 1, "resources": SMALL},
        "workers": {"min": 1, "max": 1, "resources": SMALL},
        "coordinator": {"resources": SMALL},
        **extra,
    }


def _upload(cluster: LiveCluster, files: dict[str, bytes]) -> str:
    data = tar_gz(files)
    response = cluster.api.post("/code/", files={"file": ("src.tar.gz", io.BytesIO(data))})
    assert response.status_code == 201, response.text
    return str(response.json()["digest"])


@contextmanager
def _cordoned(cluster: LiveCluster) -> Iterator[None]:
    """Every node cordoned, so a job submitted now waits until the block ends."""
    listed = cluster.api.get("/nodes/").raise_for_status().json()
    nodes = [n["id"] for n in listed["results"]]
    assert nodes, listed
    try:
        for node in nodes:
            cluster.api.post(f"/nodes/{node}/cordon/").raise_for_status()
        yield
    finally:
        for node in nodes:
            cluster.api.post(f"/nodes/{node}/uncordon/").raise_for_status()


@pytest.fixture
def started(live_cluster: LiveCluster) -> Iterator[list[dict[str, Any]]]:
    """Jobs a test submits; cancelled and waited for afterwards (the cluster is shared)."""
    jobs: list[dict[str, Any]] = []
    yield jobs
    for job in jobs:
        live_cluster.api.post(f"/jobs/{job['id']}/cancel/")
    for job in jobs:
        live_cluster.wait_state(job["id"], TERMINAL, timeout=120)


def _open_waiting(page: Page, cluster: LiveCluster, job: dict[str, Any]) -> None:
    """Open the page of a job that has not started, and check it says so."""
    page.goto(f"{cluster.url}/jobs/{job['id']}/")
    expect(page.locator("#job-state")).to_have_text("pending")
    expect(page.locator("#job-started")).to_have_text("—")
    expect(page.locator("#job-finished")).to_have_text("—")
    expect(page.locator("#job-restarts")).to_have_text("0")
    expect(page.locator("#live-status")).to_have_text("live", timeout=15_000)
    page.evaluate(WATCH_RESTARTS)


def _no_none(page: Page) -> None:
    text = page.locator("#job").inner_text()
    assert "None" not in text, text


def test_a_job_page_fills_in_as_the_job_runs_to_success(
    live_cluster: LiveCluster, as_person: SignedIn, started: list[dict[str, Any]]
) -> None:
    digest = _upload(live_cluster, {"mymodel.py": MYMODEL})
    with as_person("alice") as page:
        with _cordoned(live_cluster):
            job = live_cluster.submit(
                **_spec("web-live-success", "mymodel", digest, args={"steps": 4})
            )
            started.append(job)
            _open_waiting(page, live_cluster, job)
            expect(page.locator("#job-result-box")).to_contain_text("shows here when the job ends")
        # Placed: Started fills in while Finished still waits.
        expect(page.locator("#job-started time")).to_have_count(1, timeout=60_000)
        expect(page.locator("#job-finished")).to_have_text("—")
        expect(page.locator("#job-state")).to_have_text("succeeded", timeout=120_000)
        expect(page.locator("#job-finished time")).to_have_count(1, timeout=15_000)
        finished = page.locator("#job-finished time").get_attribute("datetime") or ""
        assert finished.startswith(live_cluster.job(job["id"])["finished_at"][:19]), finished
        result = page.locator("#job-result")
        expect(result.locator("tr")).to_have_count(1, timeout=15_000)
        expect(result.locator("th")).to_have_text("steps")
        expect(result.locator("td")).to_have_text("4")
        expect(page.locator("#job-restarts")).to_have_text("0")
        assert page.evaluate("window.__notReloaded") is True
        _no_none(page)
        assert_accessible(page)
    assert live_cluster.job(job["id"])["state"] == "succeeded"


def test_a_job_page_counts_the_restarts_of_a_failing_worker(
    live_cluster: LiveCluster, as_person: SignedIn, started: list[dict[str, Any]]
) -> None:
    digest = _upload(live_cluster, {"crashy.py": CRASHY})
    with as_person("alice") as page:
        with _cordoned(live_cluster):
            spec = _spec("web-live-restarts", "crashy", digest, max_restarts=2)
            job = live_cluster.submit(**spec)
            started.append(job)
            _open_waiting(page, live_cluster, job)
        expect(page.locator("#job-state")).to_have_text("failed", timeout=180_000)
        expect(page.locator("#job-restarts")).to_have_text("2")
        expect(page.locator("#job-reason")).to_contain_text(
            "worker 0 was killed by SIGKILL (exit code 137) (after 2 restarts"
        )
        expect(page.locator("#job-finished time")).to_have_count(1)
        expect(page.locator("#job-result-box")).to_have_text("The entrypoint returned no result.")
        # The count went up one restart at a time, each while the page watched.
        seen = [int(text) for text in page.evaluate("window.__restarts")]
        assert sorted(set(seen)) == [0, 1, 2] and seen == sorted(seen), seen
        assert page.evaluate("window.__notReloaded") is True
        _no_none(page)
        assert_accessible(page)
    done = live_cluster.job(job["id"])
    assert (done["state"], done["restarts"]) == ("failed", 2), done
