"""Borrow and reclaim through the whole platform (PostgreSQL, Redis, Celery worker and
beat, a real agent and real task processes): a job on borrowed quota is preempted when
the quota's owner needs it, checkpoints, requeues and later finishes from its checkpoint."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from .cluster import LiveCluster
from .test_recovery import _wait_metric
from .test_services_mode import SMALL

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _wait_states_seen(
    cluster: LiveCluster, job_id: int, wanted: list[str], timeout: float
) -> list[dict[str, Any]]:
    """Wait until the job's state events include `wanted` in that order."""
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        events = cluster.api.get(f"/jobs/{job_id}/events/").json()
        states = [e["to_state"] for e in events if e["kind"] == "state"]
        it = iter(states)
        if all(s in it for s in wanted):
            return list(events)
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} went {states}, never {wanted}:\n{cluster.logs(job_id)}")


def test_borrower_is_preempted_checkpoints_requeues_and_finishes_from_its_checkpoint(
    live_cluster: LiveCluster,
) -> None:
    api = live_cluster.api
    # `lab` owns no quota: everything it runs is borrowed from `recsys` (the whole node).
    created = api.post("/teams/", json={"slug": "lab", "name": "Lab"})
    assert created.status_code == 201, created.text
    assert api.put("/teams/lab/quota/", json={"cpu": 0, "memory_mb": 0, "gpu": 0}).is_success
    tasks = {
        "parameter_servers": {"replicas": 1, "resources": SMALL},
        "workers": {"min": 1, "max": 1, "resources": SMALL},
        "coordinator": {"resources": SMALL},
    }
    borrower = live_cluster.submit(
        name="borrower",
        team="lab",
        priority="experiment",
        entrypoint="ps_runtime.examples.movielens:train",
        args={"epochs": 40},
        **tasks,
    )
    _wait_metric(live_cluster, borrower["id"], "test_rmse", 3)
    job = live_cluster.job(borrower["id"])
    assert job["state"] == "running"
    assert {t["borrowed"] for t in job["tasks"]} == {True}

    # recsys needs its quota back: 1.5 of its 2 CPUs, while only 0.5 is free.
    owner = live_cluster.submit(
        name="owner",
        team="recsys",
        entrypoint="ps_runtime.examples.movielens:train",
        args={"epochs": 3},
        **tasks,
    )
    _wait_states_seen(live_cluster, borrower["id"], ["preempted", "pending"], timeout=120)
    done = live_cluster.wait_state(owner["id"], {"succeeded", "failed"}, timeout=180)
    assert done["state"] == "succeeded", live_cluster.logs(owner["id"])
    done = live_cluster.wait_state(borrower["id"], {"succeeded", "failed"}, timeout=300)
    assert done["state"] == "succeeded", live_cluster.logs(borrower["id"])

    events = api.get(f"/jobs/{borrower['id']}/events/").json()
    steps = [(e["kind"], e["to_state"]) for e in events if e["kind"] != "rescale"]
    preempted = steps.index(("state", "preempted"))
    assert steps[preempted:] == [
        ("state", "preempted"),
        ("checkpoint", ""),
        ("stop", ""),
        ("state", "pending"),
        ("state", "starting"),
        ("state", "running"),
        ("state", "succeeded"),
    ]
    by_kind = {e["kind"]: e["reason"] for e in events}
    assert by_kind["checkpoint"] == "the coordinator saved a checkpoint and stopped"
    reason = next(e["reason"] for e in events if e["to_state"] == "preempted")
    assert reason.startswith(f"making room for job {owner['id']} of team recsys")

    lines = [x["line"] for x in api.get(f"/jobs/{borrower['id']}/logs/").json()["lines"]]
    saved = [m for x in lines if (m := re.search(r"stopped on request at step (\d+)", x))]
    resumed = [
        m for x in lines if (m := re.search(r"^resumed from checkpoint .* at step (\d+)", x))
    ]
    assert len(saved) == 1 and len(resumed) == 1, lines[-40:]
    assert int(resumed[0][1]) == int(saved[0][1]) > 0
    result = next(json.loads(x)["result"] for x in lines if x.startswith('{"result"'))
    assert result["resumed_from_step"] > 0
    assert result["completed_steps"] == result["steps"]
    assert len(result["test_rmse_history"]) < 40  # the resumed run did not start over
