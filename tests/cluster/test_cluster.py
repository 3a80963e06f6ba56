"""Through the production-like cluster: the three installed hosts, and a job across them."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import ONE_CPU, submit, wait_state
from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.slow]


def test_the_installed_hosts_are_three_nodes_on_their_own_addresses(cluster: Cluster) -> None:
    nodes = cluster.nodes()
    assert {n: (nodes[n]["address"], nodes[n]["isolation"]) for n in nodes} == {
        host.name: (host.address, "sandbox") for host in cluster.hosts
    }


def test_a_job_trains_across_the_three_hosts(cluster: Cluster) -> None:
    # Five tasks of one CPU each; every host has the machine's 2: the gang needs all three.
    spec = {
        "name": "across-hosts",
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": 2},
        "parameter_servers": {"replicas": 2, "resources": ONE_CPU},
        "workers": {"min": 2, "max": 2, "resources": ONE_CPU},
        "coordinator": {"resources": ONE_CPU},
    }
    job = wait_state(cluster, submit(cluster, spec)["id"], {"succeeded", "failed"}, timeout=300)
    assert job["state"] == "succeeded", job
    assert {t["node"] for t in job["tasks"]} == {h.name for h in cluster.hosts}
    series = cluster.api.get(f"/api/v1/jobs/{job['id']}/metrics/").json()["series"]
    assert len(series["test_rmse"]) == 2, series.keys()
