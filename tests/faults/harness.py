"""What every fault case checks, and the watch kept while it runs.

A case trains a MovieLens job, injects one fault mid-training, and then requires:
- the job succeeds, with a test RMSE within `RMSE_TOLERANCE` of the clean run's, and
  its first epoch after the fault evaluates no worse than its last before it (training
  went on from where it was, rather than from fresh variables);
- the fault cost the restarts the case expects (the job's history and its `restarts`
  and `infra_restarts` agree), and a case that restarts the whole job resumed from a
  checkpoint past step 0 (the coordinator's "resumed from checkpoint … at step N"),
  while one that does not never resumed;
- recovery: the time from the fault to the first epoch evaluated after it reaching the
  platform (the job trains and its telemetry flows again), printed in the summary;
- no job is `running` without a live task process for longer than the platform takes
  to notice a lost node (`dead_running_limit`; watched every second throughout);
- while the job runs after the fault, the team's usage equals what its live tasks hold;
- once it has finished, no process of the job is left.

Polls ride out a platform process that is down or restarting (the web, PostgreSQL):
a refused connection or a 5xx is "not now"; any other error fails the case.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from tests.e2e.cluster import LiveCluster, job_processes

EPOCHS = 16
RMSE_TOLERANCE = 0.01
TASK = {"cpu": 0.5, "memory_mb": 1024}  # every task's resources (three per job)
RESULTS: list[dict[str, Any]] = []  # one row per case, printed at the end of the session
# What the coordinator prints when it restores a checkpoint (`CheckpointManager`); its
# log line of the same words names the checkpoint by path, this one by name.
_RESUMED = re.compile(r"^resumed from checkpoint ([^/\s]+) at step (\d+)$")


def processes(cluster: LiveCluster, job_id: int) -> list[int]:
    """The live processes of this cluster's job (not of another installation's job of the
    same id that runs on this machine meanwhile)."""
    return job_processes(job_id, cluster.base / "checkpoints")


def dead_running_limit() -> float:
    """How long a job may show `running` with no live task: until the platform declares
    its node lost (the settings' lost-node seconds) and the next scheduling cycle acts on
    it, plus the watch's own 1 s sampling."""
    return float(settings.NODE_LOST_AFTER_SECONDS + settings.SCHEDULING_INTERVAL_SECONDS + 1)


def poll_json(api: httpx.Client, path: str) -> Any:
    """GET `path`'s JSON; None while the platform cannot answer (its web process is down
    or restarting, or its database is: a 5xx)."""
    try:
        response = api.get(path)
    except httpx.TransportError:
        return None
    if response.status_code >= 500:
        return None
    return response.raise_for_status().json()


def movielens(name: str, team: str = "recsys", epochs: int = EPOCHS) -> dict[str, Any]:
    return {
        "name": name,
        "team": team,
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": epochs, "seed": 0},
        "parameter_servers": {"replicas": 1, "resources": TASK},
        "workers": {"min": 1, "max": 1, "resources": TASK},
        "coordinator": {"resources": TASK},
        "max_restarts": 3,
        "checkpoint_every_seconds": 0,
        # The default policy, its 10 s backoff included (docs/explanation/failure-recovery.md).
        "retry": {},
    }


def final_rmse(api: Any, job_id: int) -> float:
    series = api.get(f"/jobs/{job_id}/metrics/").json()["series"]
    points = sorted(series["test_rmse"], key=lambda p: p["step"])
    return float(points[-1]["value"])


def trained_on(api: Any, job_id: int, fault_at: datetime) -> None:
    """Training went on from where the fault found it: the first epoch evaluated after the
    fault is no worse than the last one before it. A run that started over, or resumed at
    a checkpoint's step with fresh variables, evaluates as badly as a first epoch."""
    series = api.get(f"/jobs/{job_id}/metrics/").json()["series"]
    points = [(datetime.fromisoformat(p["time"]), p["value"]) for p in series["test_rmse"]]
    before = [value for when, value in sorted(points) if when <= fault_at]
    after = [value for when, value in sorted(points) if when > fault_at]
    assert before and after, f"job {job_id}: epochs {points}, fault at {fault_at}"
    assert after[0] <= before[-1] + RMSE_TOLERANCE, (
        f"job {job_id} evaluated {after[0]:.4f} after the fault, {before[-1]:.4f} before it"
    )


def wait_epoch_after(api: Any, job_id: int, when: datetime, timeout: float = 240) -> float:
    """Wait for an epoch the job evaluated after `when`; when it arrived (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = poll_json(api, f"/jobs/{job_id}/metrics/")
        points = metrics["series"].get("test_rmse", []) if metrics is not None else []
        if any(datetime.fromisoformat(p["time"]) > when for p in points):
            return time.monotonic()
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} reported no epoch after {when}")


def wait_epochs(api: Any, job_id: int, count: int, timeout: float = 240) -> float:
    """Wait until the job has reported `count` epochs; when it did (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = poll_json(api, f"/jobs/{job_id}/metrics/")
        if metrics is not None and len(metrics["series"].get("test_rmse", [])) >= count:
            return time.monotonic()
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never reported {count} epochs")


def resumed_steps(api: Any, job_id: int) -> list[int]:
    """The step of each checkpoint the job's coordinator resumed from, in order."""
    lines = api.get(f"/jobs/{job_id}/logs/", params={"q": "resumed from checkpoint"}).json()
    return [int(m[2]) for x in lines["lines"] if (m := _RESUMED.match(x["line"].strip()))]


def restart_count(api: Any, job_id: int) -> int:
    """Restarts the job's history shows, which must be what its `restarts` and
    `infra_restarts` (the two budgets) count: a task relaunched alone (a `restart`
    event), the whole job restarted in place (`restarting`), or requeued to be placed
    elsewhere (`preempted` more often than its preemptions: a requeue is no preemption)."""
    events = api.get(f"/jobs/{job_id}/events/").json()
    job = api.get(f"/jobs/{job_id}/").json()
    requeued = sum(1 for e in events if e["kind"] == "state" and e["to_state"] == "preempted")
    shown = (
        requeued
        - job["preemptions"]
        + sum(1 for e in events if e["kind"] == "restart" or e["to_state"] == "restarting")
    )
    counted = job["restarts"] + job["infra_restarts"]
    assert counted == shown, f"the job counts {counted} restarts, its history shows {shown}"
    return shown


def check_resumed(api: Any, job_id: int, *, resumed: bool) -> int:
    """A whole-job restart (or requeue) resumed from one checkpoint past step 0; without
    one, the coordinator never restored one. Returns the step (0 when none)."""
    steps = resumed_steps(api, job_id)
    if not resumed:
        assert steps == [], f"job {job_id} resumed from checkpoints at steps {steps}"
        return 0
    assert len(steps) == 1 and steps[0] > 0, f"job {job_id} resumed at steps {steps}"
    return steps[0]


@dataclass
class Watch:
    """Every second: is the job `running` with no live task process? The longest such
    stretch is what `dead_running_s` reports (the web being down pauses the watch)."""

    cluster: LiveCluster
    job_id: int
    dead_running_s: float = 0.0
    error: BaseException | None = None  # what stopped the watch early, raised on exit
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.error is not None and exc_type is None:
            raise AssertionError(f"the watch of job {self.job_id} failed") from self.error

    def check(self) -> None:
        """The job never showed `running` without a live task for longer than the
        platform takes to notice a lost node."""
        limit = dead_running_limit()
        assert self.dead_running_s <= limit, (
            f"job {self.job_id} was running without a live task for "
            f"{self.dead_running_s:.1f} s (more than {limit:g} s)"
        )

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # the test thread raises it (`__exit__`)
            self.error = exc

    def _run(self) -> None:
        since: float | None = None
        while not self._stop.wait(1.0):
            job = poll_json(self.cluster.api, f"/jobs/{self.job_id}/")
            if job is None:
                continue
            if job["state"] == "running" and not processes(self.cluster, self.job_id):
                since = since if since is not None else time.monotonic()
                self.dead_running_s = max(self.dead_running_s, time.monotonic() - since)
            else:
                since = None


def team_usage_matches_live_tasks(cluster: LiveCluster, job_id: int, team: str = "recsys") -> None:
    """The team's `used` equals what the job's live task processes hold (by role)."""
    deadline = time.monotonic() + 30
    while True:
        live = {t["role"] for t in cluster.job(job_id)["tasks"] if t["state"] == "running"}
        roles_alive = len(processes(cluster, job_id)) > 0
        used = cluster.api.get(f"/teams/{team}/quota/").json()["usage"]["used"]
        want = {"cpu": TASK["cpu"] * len(live), "memory_mb": TASK["memory_mb"] * len(live)}
        got = {"cpu": used["cpu"], "memory_mb": used["memory_mb"]}
        if roles_alive and got == want and len(live) == 3:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"team usage {got}, live tasks {sorted(live)} hold {want}")
        time.sleep(0.5)


def no_processes_left(cluster: LiveCluster, job_id: int) -> None:
    """Once the job is over, no process of it is left (within 30 s)."""
    deadline = time.monotonic() + 30
    while processes(cluster, job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = processes(cluster, job_id)
    assert left == [], f"processes of job {job_id} were left behind: {_described(left)}"


def _described(pids: list[int]) -> list[str]:
    """What each process is: its state and command line (for a failure's message)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):  # it ended meanwhile
            continue
        out.append(f"{pid} [{state}] {argv[:200]}")
    return out


def run_case(
    cluster: LiveCluster,
    name: str,
    clean_rmse: float,
    inject: Callable[[int], None],
    *,
    restarts: int,
    resumed: bool,
    labelled: Callable[[int], object] | None = None,
    after_epochs: int = 3,
) -> dict[str, Any]:
    """Submit, inject the fault after `after_epochs` epochs, check everything; a row.

    `restarts` is what the fault must cost and `resumed` whether the job then resumed
    from a checkpoint; `labelled(job_id)`, run right after the fault, checks its cause."""
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    job = cluster.submit(**movielens(f"fault-{slug}"))
    job_id = job["id"]
    with Watch(cluster, job_id) as watch:
        wait_epochs(cluster.api, job_id, after_epochs)
        t0, fault_at = time.monotonic(), datetime.now(UTC)
        inject(job_id)
        if labelled is not None:
            labelled(job_id)
        recovery = wait_epoch_after(cluster.api, job_id, fault_at) - t0
        if cluster.job(job_id)["state"] == "running":
            team_usage_matches_live_tasks(cluster, job_id)
        done = cluster.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=300)
    assert done["state"] == "succeeded", cluster.logs(job_id)
    rmse = final_rmse(cluster.api, job_id)
    assert abs(rmse - clean_rmse) <= RMSE_TOLERANCE, (rmse, clean_rmse)
    trained_on(cluster.api, job_id, fault_at)
    watch.check()
    spent = restart_count(cluster.api, job_id)
    assert spent == restarts, f"{name}: {spent} restarts, expected {restarts}"
    step = check_resumed(cluster.api, job_id, resumed=resumed)
    no_processes_left(cluster, job_id)
    row = {
        "case": name,
        "job_id": job_id,
        "recovery_s": round(recovery, 1),
        "rmse": round(rmse, 4),
        "clean_rmse": round(clean_rmse, 4),
        # What the fault cost: a worker relaunched alone, or the whole job restarted.
        "restarts": spent,
        "resumed_at": step,
        "dead_running_s": round(watch.dead_running_s, 1),
    }
    RESULTS.append(row)
    return row
