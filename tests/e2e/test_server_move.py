"""Reclaim moves a server instead of preempting: a borrowing job with replicated PS shards
holds room on a node the quota's owner needs; the scheduler places one of its servers on
another node (the replacement copies its shards from a live replica, the old one stops)
and the job runs on, never leaving `running`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import require_services
from .cluster import (
    UNSANDBOXED,
    LiveCluster,
    fresh_database,
    job_processes,
    second_agent,
    services_cluster,
)
from .test_recovery import _events, _wait_metric

pytestmark = [pytest.mark.services, pytest.mark.slow]
# The scenario needs nodes that host one team at a time (what reclaim clears by a move):
# its agents opt out of the sandbox, which only a developer's setting does.


@pytest.fixture(scope="module")
def unsandboxed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    database_url, redis_url = require_services()
    tmp = tmp_path_factory.mktemp("move")
    redis_move = redis_url.rsplit("/", 1)[0] + "/10"  # 11-14 belong to other modules
    with (
        fresh_database(database_url) as db_url,
        services_cluster(db_url, redis_move, tmp, agent_env=UNSANDBOXED) as cluster,
    ):
        yield cluster


def _cpu(cpu: float) -> dict[str, Any]:
    return {"cpu": cpu, "memory_mb": 512}


def _spec(
    name: str, team: str, *, ps: int, replication: int, worker: float, epochs: int
) -> dict[str, Any]:
    return {
        "name": name,
        "team": team,
        "priority": "experiment" if team == "lab" else "normal",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": epochs, "seed": 3},
        "parameter_servers": {"replicas": ps, "replication": replication, "resources": _cpu(0.25)},
        "workers": {"min": 1, "max": 1, "resources": _cpu(worker)},
        "coordinator": {"resources": _cpu(0.25)},
    }


def _story(cluster: LiveCluster, job_id: int) -> str:
    """A job's events and the end of its log, for a failed assertion."""
    events = "\n".join(
        f"{e['kind']} {e['to_state']} {e['reason']}" for e in _events(cluster, job_id)
    )
    return f"events:\n{events}\nlog:\n{cluster.logs(job_id)}"


def _nodes_of(cluster: LiveCluster, job_id: int) -> dict[tuple[str, int], str]:
    return {(t["role"], t["index"]): t["node"] for t in cluster.job(job_id)["tasks"]}


def test_reclaim_moves_a_server_of_a_replicated_job_which_keeps_running(
    unsandboxed_cluster: LiveCluster, tmp_path: Path
) -> None:
    live_cluster = unsandboxed_cluster
    api = live_cluster.api
    if api.get("/teams/lab/").status_code == 404:
        assert api.post("/teams/", json={"slug": "lab", "name": "Lab"}).status_code == 201
    assert api.put("/teams/lab/quota/", json={"cpu": 0, "memory_mb": 0, "gpu": 0}).is_success
    node2: dict[str, Any] | None = None
    jobs: list[int] = []
    try:
        node2 = second_agent(live_cluster, tmp_path)
        nodes = api.get("/nodes/").json()["results"]
        # These agents run tasks unsandboxed: a node then hosts one team at a time, which
        # is what this scenario reclaims.
        assert {n["isolation"] for n in nodes} == {"none"}, nodes
        # Earlier tests' tasks may still be stopping: the layout below needs idle nodes.
        deadline = time.monotonic() + 60
        while any(n["active_tasks"] for n in api.get("/nodes/").json()["results"]):
            assert time.monotonic() < deadline, api.get("/nodes/").json()["results"]
            time.sleep(0.3)
        # lab borrows: its 3 servers go to distinct nodes where they can, so one node
        # holds a single server of the job and the other node the rest.
        replicated = live_cluster.submit(
            **_spec("replicated", "lab", ps=3, replication=1, worker=0.5, epochs=12)
        )
        jobs.append(replicated["id"])
        live_cluster.wait_state(replicated["id"], {"running"}, timeout=120)
        before = _nodes_of(live_cluster, replicated["id"])
        lone = [
            (key, node) for key, node in before.items() if list(before.values()).count(node) == 1
        ]
        assert len(lone) == 1 and lone[0][0][0] == "ps", before
        (_, index), lone_node = lone[0]
        _wait_metric(live_cluster, replicated["id"], "test_rmse", 2)

        # recsys owns the quota. These agents do not sandbox tasks, so a node hosts one
        # team at a time: only the lone server's node can be cleared for it, by a move.
        owner = live_cluster.submit(
            **_spec("owner", "recsys", ps=1, replication=0, worker=0.5, epochs=2)
        )
        jobs.append(owner["id"])
        done = live_cluster.wait_state(owner["id"], {"succeeded", "failed"}, timeout=240)
        assert done["state"] == "succeeded", live_cluster.logs(owner["id"])
        assert {t["node"] for t in done["tasks"]} == {lone_node}
        events = _events(live_cluster, replicated["id"])
        moves = [e for e in events if e["kind"] == "move"]
        assert len(moves) == 1, events
        assert moves[0]["reason"].startswith(f"ps {index} moved from {lone_node} to ")
        assert f"making room for job {owner['id']}" in moves[0]["reason"]
        state = live_cluster.job(replicated["id"])["state"]
        assert state in {"running", "succeeded"}, _story(live_cluster, replicated["id"])

        done = live_cluster.wait_state(replicated["id"], {"succeeded", "failed"}, timeout=300)
        assert done["state"] == "succeeded", live_cluster.logs(replicated["id"])
        events = _events(live_cluster, replicated["id"])
        states = [e["to_state"] for e in events if e["kind"] == "state"]
        assert states == ["starting", "running", "succeeded"]  # never left running
        assert not [e for e in events if e["kind"] == "restart"]
        after = {(t["role"], t["index"]): t for t in done["tasks"]}
        assert after[("ps", index)]["node"] != lone_node
        assert after[("ps", index)]["attempt"] == 2
        assert all(t["attempt"] == 1 for k, t in after.items() if k != ("ps", index))
        lines = [x["line"] for x in api.get(f"/jobs/{replicated['id']}/logs/").json()["lines"]]
        assert not any("resumed from checkpoint" in line for line in lines)
        assert any("copied" in line for line in lines), "the moved server copied no shard"
        series = api.get(f"/jobs/{replicated['id']}/metrics/").json()["series"]
        rmse = [p["value"] for p in series["test_rmse"]]
        assert len(rmse) == 12 and rmse[-1] < rmse[0], rmse
    finally:
        for job_id in jobs:
            api.post(f"/jobs/{job_id}/cancel/")
        for job_id in jobs:
            live_cluster.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=60)
        if node2 is not None:  # no later job may be placed where no agent runs
            assert api.post(f"/nodes/{node2['id']}/cordon/").is_success
        live_cluster.group.stop(names=["agent2"])
        deadline = time.monotonic() + 15
        while any(job_processes(j) for j in jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
