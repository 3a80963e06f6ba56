"""One services-mode TrainHub on PostgreSQL and Redis instances of the suite's own
(`tests/instances.py`), so that stopping them touches nothing else; and the clean run
every fault case is compared with. Its agent's package index is an empty wheelhouse (no
network), where a job's environment build fails for want of its packages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.cluster import LiveCluster, services_cluster
from tests.instances import Postgres, Redis
from tests.ps_runtime.agent.wheels import offline_index

from .harness import RESULTS, final_rmse, movielens
from .labels import LABELLED, web_session


class FaultCluster:
    """The cluster, and the servers under it that a case may stop and start."""

    def __init__(self, cluster: LiveCluster, postgres: Postgres, redis: Redis, tmp: Path) -> None:
        self.cluster = cluster
        self.postgres = postgres
        self.redis = redis
        self.tmp = tmp  # for what a case adds (a second agent's state)
        self.clean_rmse = 0.0


@pytest.fixture(scope="session")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    postgres, redis = Postgres(), Redis()
    try:
        postgres.start()
        database_url = postgres.create_database("trainhub")
        redis.start()
        tmp: Path = tmp_path_factory.mktemp("faults")
        wheels = tmp / "wheels"
        wheels.mkdir()
        agent_env = offline_index(wheels)
        with services_cluster(database_url, redis.url, tmp, agent_env=agent_env) as cluster:
            suite = FaultCluster(cluster, postgres, redis, tmp)
            job = cluster.submit(**movielens("clean"))
            done = cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=300)
            assert done["state"] == "succeeded", cluster.logs(job["id"])
            suite.clean_rmse = final_rmse(cluster.api, job["id"])
            yield suite
    finally:
        redis.stop()
        postgres.remove()


@pytest.fixture(scope="session")
def web(faults: FaultCluster) -> Iterator[httpx.Client]:
    """The admin, signed in to the web pages."""
    client = web_session(faults.cluster.url)
    try:
        yield client
    finally:
        client.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if LABELLED:
        terminalreporter.section("fault suite: causes (labelled on the page and in the API)")
        terminalreporter.write_line(
            f"{'case':<26} {'cause':<20} {'restarts':>9} {'resumed':>7} {'took':>7}"
        )
        for row in LABELLED:
            terminalreporter.write_line(
                f"{row['case']:<26} {row['cause']:<20} {row['restarts']:>9} "
                f"{row['resumed_at'] or '-':>7} {row['seconds']:>6.1f}s"
            )
    if not RESULTS:
        return
    terminalreporter.section("fault suite: recovery")
    terminalreporter.write_line(
        f"{'case':<22} {'recovery':>9} {'rmse':>8} {'clean':>8} {'restarts':>8} "
        f"{'resumed':>7} {'dead':>6}"
    )
    for row in RESULTS:
        terminalreporter.write_line(
            f"{row['case']:<22} {row['recovery_s']:>8.1f}s {row['rmse']:>8.4f} "
            f"{row['clean_rmse']:>8.4f} {row['restarts']:>8} {row['resumed_at'] or '-':>7} "
            f"{row['dead_running_s']:>5.1f}s"
        )
