"""Server processes die and restart under a running cluster: a killed web process and a
killed Celery worker lose nothing of a running job, and a rolling restart of the web
processes fails no request."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest

from tests.cluster.conftest import TERMINAL, movielens, submit_on, wait_metric, wait_state
from tests.cluster.harness import Cluster, trusting

pytestmark = [pytest.mark.slow]

# nginx leaves a process that refused a connection alone this long (max_fails=1,
# fail_timeout=5s in deploy/nginx.conf): a rolling restart waits it out between processes.
FAIL_TIMEOUT = 5


class Calls:
    """API calls through nginx as a script makes them: each may be retried once."""

    def __init__(self, cluster: Cluster) -> None:
        self.http = httpx.Client(
            base_url=cluster.url,
            verify=trusting(cluster.ca_bundle),
            headers=dict(cluster.api.headers),
            timeout=30,
        )
        self.made = self.retried = 0
        self.failed: list[str] = []

    def get(self, path: str) -> httpx.Response | None:
        self.made += 1
        for attempt in (1, 2):
            try:
                response = self.http.get(path)
                if response.status_code < 500:
                    return response
                error = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                error = repr(exc)
            if attempt == 1:
                self.retried += 1
        self.failed.append(f"GET {path}: {error}")
        return None


def _seen_since(cluster: Cluster, moment: datetime) -> bool:
    """Every host's agent has heartbeated (through nginx, to a live web) since `moment`."""
    nodes = cluster.nodes()
    return all(
        nodes[h.name]["last_seen"] and datetime.fromisoformat(nodes[h.name]["last_seen"]) > moment
        for h in cluster.hosts
    )


def test_a_killed_web_process_and_worker_lose_nothing_of_a_running_job(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    job = submit_on(cluster, cluster.hosts[0].name, movielens("failover", epochs=6))
    wait_state(cluster, job["id"], {"running"}, timeout=120)
    wait_metric(cluster, job["id"], "test_rmse", 1, timeout=120)
    calls = Calls(cluster)
    killed = datetime.now(UTC)
    started = time.monotonic()
    cluster.stop("web1", kill=True)
    cluster.stop("worker1", kill=True)
    reconnected = None
    ended = False
    try:
        # Until the job ends and every agent is back (a short job may end first: the
        # agents' reconnect backoff is jittered), or 120 s for the agents.
        while not (ended and (reconnected is not None or time.monotonic() - started > 120)):
            response = calls.get(f"/api/v1/jobs/{job['id']}/")
            if reconnected is None and _seen_since(cluster, killed):
                reconnected = time.monotonic() - started
            ended = ended or (response is not None and response.json()["state"] in TERMINAL)
            assert ended or time.monotonic() - started < 300, "the job did not end"
            time.sleep(0.5)
    finally:
        cluster.start("web1")
        cluster.start("worker1")
    done = wait_state(cluster, job["id"], TERMINAL, timeout=10)
    assert calls.failed == [], calls.failed
    assert done["state"] == "succeeded", done
    assert {t["attempt"] for t in done["tasks"]} == {1}, done["tasks"]  # nothing restarted
    series = cluster.api.get(f"/api/v1/jobs/{job['id']}/metrics/").json()["series"]
    assert [p["step"] for p in series["epoch"]] == sorted({p["step"] for p in series["epoch"]})
    assert [p["value"] for p in series["epoch"]] == [1, 2, 3, 4, 5, 6]
    assert reconnected is not None, "an agent never heartbeated again after the kill"
    with capsys.disabled():
        print(
            f"\nweb1 and worker1 killed mid-job: {calls.made} API calls, {calls.retried} "
            f"retried once, 0 failed; every agent heartbeating again after {reconnected:.1f} s; "
            "the job succeeded with every epoch's metrics and no task restarted"
        )


def test_restarting_each_web_process_in_turn_under_load_fails_no_request(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    stop = threading.Event()
    statuses: Counter[int] = Counter()
    failures: list[str] = []

    def load() -> None:
        http = httpx.Client(
            base_url=cluster.url,
            verify=trusting(cluster.ca_bundle),
            headers=dict(cluster.api.headers),
            timeout=30,
        )
        while not stop.is_set():
            for path in ("/api/v1/jobs/", "/api/v1/nodes/", "/readyz"):
                try:
                    statuses[http.get(path).status_code] += 1
                except httpx.HTTPError as exc:
                    failures.append(f"{path}: {exc!r}")

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    try:
        time.sleep(2)
        for name in cluster.webs:
            cluster.stop(name)  # SIGTERM: it finishes what it serves, takes nothing new
            cluster.start(name)
            time.sleep(FAIL_TIMEOUT + 1)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    seconds = time.monotonic() - started
    assert failures == [], failures[:5]
    assert set(statuses) == {200}, statuses
    with capsys.disabled():
        print(
            f"\nrolling restart of {len(cluster.webs)} web processes under load: "
            f"{sum(statuses.values())} requests in {seconds:.0f} s, 0 failed"
        )
