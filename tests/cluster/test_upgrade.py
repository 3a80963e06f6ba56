"""Every agent upgraded under running jobs: the installer run again on each host (no
token: the host stays enrolled), then its agent restarted, as `systemctl restart` does.
The jobs' tasks are adopted by the new agents: none restarts."""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import TERMINAL, job, movielens, submit_on, wait_metric, wait_state
from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.slow]


def _epochs(cluster: Cluster, job_id: int) -> int:
    series = cluster.api.get(f"/api/v1/jobs/{job_id}/metrics/").json()["series"]
    return len(series.get("test_rmse", []))


def test_upgrading_every_agent_restarts_no_task(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # A job on each host, running through the upgrade.
    running = [
        submit_on(cluster, host.name, movielens(f"through-upgrade-{host.name}", epochs=10000))
        for host in cluster.hosts
    ]
    try:
        for each in running:
            wait_state(cluster, each["id"], {"running"}, timeout=120)
            wait_metric(cluster, each["id"], "test_rmse", 1, timeout=120)
        before = {each["id"]: job(cluster, each["id"])["tasks"] for each in running}
        started = time.monotonic()
        for host in cluster.hosts:
            again = cluster.install(host)
            assert again.returncode == 0, again.stdout + again.stderr
            assert "already enrolled" in again.stdout, again.stdout
            cluster.stop_agent(host)  # its tasks keep running: the next agent adopts them
            cluster.start_agent(host)
        seconds = time.monotonic() - started
        # Training goes on past the upgrade, on the same task attempts.
        for each in running:
            epochs = _epochs(cluster, each["id"])
            wait_metric(cluster, each["id"], "test_rmse", epochs + 2, timeout=180)
            after = job(cluster, each["id"])
            assert after["state"] == "running", after
            assert [(t["id"], t["attempt"], t["state"]) for t in after["tasks"]] == [
                (t["id"], t["attempt"], "running") for t in before[each["id"]]
            ]
            events = cluster.api.get(f"/api/v1/jobs/{each['id']}/events/").json()
            assert not [e for e in events if e["kind"] == "restart"], events
        nodes = cluster.nodes().values()
        assert len({n["agent_version"] for n in nodes}) == 1
        assert not any(n["outdated"] for n in nodes)
    finally:
        for each in running:
            cluster.api.post(f"/api/v1/jobs/{each['id']}/cancel/")
        for each in running:
            wait_state(cluster, each["id"], TERMINAL, timeout=60)
    with capsys.disabled():
        print(
            f"\n{len(cluster.hosts)} agents upgraded (installer again, agent restarted) in "
            f"{seconds:.0f} s under {len(running)} running jobs: 0 task restarts"
        )
