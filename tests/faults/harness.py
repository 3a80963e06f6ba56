"""What every fault case checks, and the watch kept while it runs.

A case trains a MovieLens job, injects one fault mid-training, and then requires:
- the job succeeds, with a test RMSE within `RMSE_TOLERANCE` of the clean run's;
- recovery: the time from the fault to the first epoch evaluated after it reaching the
  platform (the job trains and its telemetry flows again), printed in the summary;
- no job is `running` without a live task process for more than `MAX_DEAD_RUNNING_S`
  (watched every second throughout);
- while the job runs after the fault, the team's usage equals what its live tasks hold;
- once it has finished, no process of the job is left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.e2e.cluster import LiveCluster, job_processes

EPOCHS = 16
RMSE_TOLERANCE = 0.01
MAX_DEAD_RUNNING_S = 60.0
TASK = {"cpu": 0.5, "memory_mb": 1024}  # every task's resources (three per job)
RESULTS: list[dict[str, Any]] = []  # one row per case, printed at the end of the session


def movielens(name: str, team: str = "recsys") -> dict[str, Any]:
    return {
        "name": name,
        "team": team,
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": EPOCHS, "seed": 0},
        "parameter_servers": {"replicas": 1, "resources": TASK},
        "workers": {"min": 1, "max": 1, "resources": TASK},
        "coordinator": {"resources": TASK},
        "max_restarts": 3,
        "checkpoint_every_seconds": 0,
    }


def epochs(api: Any, job_id: int) -> int:
    series = api.get(f"/jobs/{job_id}/metrics/").json()["series"]
    return len(series.get("test_rmse", []))


def final_rmse(api: Any, job_id: int) -> float:
    series = api.get(f"/jobs/{job_id}/metrics/").json()["series"]
    points = sorted(series["test_rmse"], key=lambda p: p["step"])
    return float(points[-1]["value"])


def wait_epoch_after(api: Any, job_id: int, when: datetime, timeout: float = 240) -> float:
    """Wait for an epoch the job evaluated after `when`; when it arrived (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            series = api.get(f"/jobs/{job_id}/metrics/").json()["series"]
            if any(datetime.fromisoformat(p["time"]) > when for p in series.get("test_rmse", [])):
                return time.monotonic()
        except Exception:  # the web process may be the one that is down
            pass
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} reported no epoch after {when}")


def wait_epochs(api: Any, job_id: int, count: int, timeout: float = 240) -> float:
    """Wait until the job has reported `count` epochs; when it did (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if epochs(api, job_id) >= count:
                return time.monotonic()
        except Exception:  # the web process may be the one that is down
            pass
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never reported {count} epochs")


@dataclass
class Watch:
    """Every second: is the job `running` with no live task process? The longest such
    stretch is what `dead_running_s` reports (the web being down pauses the watch)."""

    api: Any
    job_id: int
    dead_running_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        since: float | None = None
        while not self._stop.wait(1.0):
            try:
                state = self.api.get(f"/jobs/{self.job_id}/").json()["state"]
            except Exception:
                continue
            if state == "running" and not job_processes(self.job_id):
                since = since if since is not None else time.monotonic()
                self.dead_running_s = max(self.dead_running_s, time.monotonic() - since)
            else:
                since = None


def team_usage_matches_live_tasks(cluster: LiveCluster, job_id: int, team: str = "recsys") -> None:
    """The team's `used` equals what the job's live task processes hold (by role)."""
    deadline = time.monotonic() + 30
    while True:
        live = {t["role"] for t in cluster.job(job_id)["tasks"] if t["state"] == "running"}
        roles_alive = len(job_processes(job_id)) > 0
        used = cluster.api.get(f"/teams/{team}/quota/").json()["usage"]["used"]
        want = {"cpu": TASK["cpu"] * len(live), "memory_mb": TASK["memory_mb"] * len(live)}
        got = {"cpu": used["cpu"], "memory_mb": used["memory_mb"]}
        if roles_alive and got == want and len(live) == 3:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"team usage {got}, live tasks {sorted(live)} hold {want}")
        time.sleep(0.5)


def run_case(
    cluster: LiveCluster,
    name: str,
    clean_rmse: float,
    inject: Callable[[int], None],
    *,
    after_epochs: int = 3,
) -> dict[str, Any]:
    """Submit, inject the fault after `after_epochs` epochs, check everything; a row."""
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    job = cluster.submit(**movielens(f"fault-{slug}"))
    job_id = job["id"]
    with Watch(cluster.api, job_id) as watch:
        wait_epochs(cluster.api, job_id, after_epochs)
        t0, fault_at = time.monotonic(), datetime.now(UTC)
        inject(job_id)
        recovery = wait_epoch_after(cluster.api, job_id, fault_at) - t0
        if cluster.job(job_id)["state"] == "running":
            team_usage_matches_live_tasks(cluster, job_id)
        done = cluster.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=300)
    assert done["state"] == "succeeded", cluster.logs(job_id)
    rmse = final_rmse(cluster.api, job_id)
    assert abs(rmse - clean_rmse) <= RMSE_TOLERANCE, (rmse, clean_rmse)
    assert watch.dead_running_s <= MAX_DEAD_RUNNING_S, watch.dead_running_s
    deadline = time.monotonic() + 30
    while job_processes(job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_processes(job_id) == [], "processes of the job were left behind"
    row = {
        "case": name,
        "recovery_s": round(recovery, 1),
        "rmse": round(rmse, 4),
        "clean_rmse": round(clean_rmse, 4),
        # What the fault cost: a worker relaunched alone, or the whole job restarted.
        "restarts": sum(
            1
            for e in cluster.api.get(f"/jobs/{job_id}/events/").json()
            if e["kind"] == "restart" or e["to_state"] == "restarting"
        ),
        "dead_running_s": round(watch.dead_running_s, 1),
    }
    RESULTS.append(row)
    return row
