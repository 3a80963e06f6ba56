"""One services-mode TrainHub on PostgreSQL and Redis instances of the suite's own
(`tests/instances.py`), so that stopping them touches nothing else; and the clean run
every fault case is compared with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import LiveCluster, services_cluster
from tests.instances import Postgres, Redis

from .harness import RESULTS, final_rmse, movielens


class FaultCluster:
    """The cluster, and the servers under it that a case may stop and start."""

    def __init__(self, cluster: LiveCluster, postgres: Postgres, redis: Redis) -> None:
        self.cluster = cluster
        self.postgres = postgres
        self.redis = redis
        self.clean_rmse = 0.0


@pytest.fixture(scope="session")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    postgres, redis = Postgres(), Redis()
    try:
        postgres.start()
        database_url = postgres.create_database("trainhub")
        redis.start()
        tmp: Path = tmp_path_factory.mktemp("faults")
        with services_cluster(database_url, redis.url, tmp) as cluster:
            suite = FaultCluster(cluster, postgres, redis)
            job = cluster.submit(**movielens("clean"))
            done = cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=300)
            assert done["state"] == "succeeded", cluster.logs(job["id"])
            suite.clean_rmse = final_rmse(cluster.api, job["id"])
            yield suite
    finally:
        redis.stop()
        postgres.remove()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    terminalreporter.section("fault suite: recovery")
    terminalreporter.write_line(
        f"{'case':<22} {'recovery':>9} {'rmse':>8} {'clean':>8} {'restarts':>8} {'dead':>6}"
    )
    for row in RESULTS:
        terminalreporter.write_line(
            f"{row['case']:<22} {row['recovery_s']:>8.1f}s {row['rmse']:>8.4f} "
            f"{row['clean_rmse']:>8.4f} {row['restarts']:>8} {row['dead_running_s']:>5.1f}s"
        )
