"""Through the production-like cluster: the three installed hosts, and jobs on each."""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import movielens, submit_on, wait_state
from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.slow]


def test_the_installed_hosts_are_three_nodes_on_their_own_addresses(cluster: Cluster) -> None:
    nodes = cluster.nodes()
    assert {n: (nodes[n]["address"], nodes[n]["isolation"]) for n in nodes} == {
        host.name: (host.address, "sandbox") for host in cluster.hosts
    }


def test_jobs_train_on_each_of_the_three_hosts(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    jobs = {
        host.name: submit_on(cluster, host.name, movielens(f"on-{host.name}", epochs=2))
        for host in cluster.hosts
    }
    for host, job in jobs.items():
        done = wait_state(cluster, job["id"], {"succeeded", "failed"}, timeout=300)
        assert done["state"] == "succeeded", done
        assert {t["node"] for t in done["tasks"]} == {host}, done["tasks"]
        series = cluster.api.get(f"/api/v1/jobs/{job['id']}/metrics/").json()["series"]
        assert len(series["test_rmse"]) == 2, series.keys()
    with capsys.disabled():
        print(f"\n3 jobs, one on each host, trained in {time.monotonic() - started:.0f} s")
