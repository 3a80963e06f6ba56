"""Every agent upgraded under a running job: the installer run again on each host (no
token: the host stays enrolled), then its agent restarted, as `systemctl restart` does.
The job's tasks are adopted by the new agents: none restarts."""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import ONE_CPU, TERMINAL, job, submit, wait_metric, wait_state
from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.slow]


def test_upgrading_every_agent_restarts_no_task(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        "name": "through-upgrade",
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": 10000},
        "parameter_servers": {"replicas": 2, "resources": ONE_CPU},
        "workers": {"min": 2, "max": 2, "resources": ONE_CPU},
        "coordinator": {"resources": ONE_CPU},
    }
    running = submit(cluster, spec)
    try:
        wait_state(cluster, running["id"], {"running"}, timeout=120)
        wait_metric(cluster, running["id"], "test_rmse", 1, timeout=120)
        before = job(cluster, running["id"])["tasks"]
        assert {t["node"] for t in before} == {h.name for h in cluster.hosts}
        started = time.monotonic()
        for host in cluster.hosts:
            again = cluster.install(host)
            assert again.returncode == 0, again.stdout + again.stderr
            assert "already enrolled" in again.stdout, again.stdout
            cluster.stop_agent(host)  # its tasks keep running: the next agent adopts them
            cluster.start_agent(host)
        seconds = time.monotonic() - started
        # Training goes on past the upgrade, on the same task attempts.
        epochs = len(
            cluster.api.get(f"/api/v1/jobs/{running['id']}/metrics/").json()["series"]["test_rmse"]
        )
        wait_metric(cluster, running["id"], "test_rmse", epochs + 2, timeout=120)
        after = job(cluster, running["id"])
        assert after["state"] == "running", after
        assert [(t["id"], t["attempt"], t["state"]) for t in after["tasks"]] == [
            (t["id"], t["attempt"], "running") for t in before
        ]
        events = cluster.api.get(f"/api/v1/jobs/{running['id']}/events/").json()
        assert not [e for e in events if e["kind"] == "restart"], events
        versions = {n["agent_version"] for n in cluster.nodes().values()}
        assert len(versions) == 1 and not any(n["outdated"] for n in cluster.nodes().values())
    finally:
        cluster.api.post(f"/api/v1/jobs/{running['id']}/cancel/")
        wait_state(cluster, running["id"], TERMINAL, timeout=60)
    with capsys.disabled():
        print(
            f"\n{len(cluster.hosts)} agents upgraded (installer again, agent restarted) in "
            f"{seconds:.0f} s under a running job: 0 task restarts"
        )
