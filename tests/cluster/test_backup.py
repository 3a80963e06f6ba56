"""A backup taken while a job runs (`pg_dump`, as docs/how-to/backup-restore.md says)
restores into a fresh PostgreSQL that then serves the same users, jobs and metrics."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
from trainhub.standalone.processes import ProcessGroup

from tests.cluster.conftest import TERMINAL, job, movielens, submit_on, wait_metric, wait_state
from tests.cluster.harness import Cluster, web_process
from tests.e2e.cluster import ADMIN
from tests.instances import Postgres, free_port

pytestmark = [pytest.mark.slow]


def _restored_web(cluster: Cluster, database_url: str) -> tuple[ProcessGroup, httpx.Client]:
    """A web process of its own on the restored database, asked as nginx asks (https
    forwarded from a trusted proxy)."""
    port = free_port()
    env = {**cluster.group.env, "DATABASE_URL": database_url}
    env["REDIS_URL"] = env["REDIS_URL"].rsplit("/", 1)[0] + "/5"  # not the cluster's events
    group = ProcessGroup(env=env, log_dir=cluster.tmp / "logs" / "restored")
    group.start("web", web_process(port))
    http = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "127.0.0.1"},
        timeout=30,
    )
    return group, http


def _sign_in(http: httpx.Client, group: ProcessGroup, timeout: float = 60) -> str:
    """The admin's new token from the restored web process, once it answers."""
    deadline = time.monotonic() + timeout
    while True:
        assert not group.exited(), f"the restored web process exited: {group.exited()}"
        try:
            signed = http.post(
                "/api/v1/auth/token/", json={"username": ADMIN[0], "password": ADMIN[1]}
            )
            if signed.status_code == 201:
                return str(signed.json()["token"])
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the restored web process never signed the admin in"
        time.sleep(0.5)


def test_a_backup_taken_mid_run_restores_into_a_fresh_instance(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    host = cluster.hosts[0].name
    finished = submit_on(cluster, host, movielens("before-backup", epochs=2))
    wait_state(cluster, finished["id"], {"succeeded"}, timeout=180)
    running = submit_on(cluster, host, movielens("during-backup", epochs=10000))
    wait_metric(cluster, running["id"], "test_rmse", 1, timeout=120)
    dump = cluster.tmp / "trainhub.dump"
    source = cluster.group.env["DATABASE_URL"]
    done = subprocess.run(
        ["pg_dump", "--format=custom", f"--file={dump}", source], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    jobs_then = cluster.api.get("/api/v1/jobs/").json()["results"]
    cluster.api.post(f"/api/v1/jobs/{running['id']}/cancel/")
    wait_state(cluster, running["id"], TERMINAL, timeout=60)

    fresh = Postgres()
    group = None
    try:
        fresh.start()
        target = fresh.create_database()
        restore = subprocess.run(
            ["pg_restore", "--no-owner", f"--dbname={target}", str(dump)],
            capture_output=True,
            text=True,
        )
        assert restore.returncode == 0, restore.stderr
        group, http = _restored_web(cluster, target)
        http.headers["Authorization"] = f"Token {_sign_in(http, group)}"
        jobs_now = http.get("/api/v1/jobs/").json()["results"]
        assert [(j["id"], j["name"]) for j in jobs_now] == [(j["id"], j["name"]) for j in jobs_then]
        restored = {j["id"]: j["state"] for j in jobs_now}
        assert restored[finished["id"]] == "succeeded"
        assert restored[running["id"]] == "running"  # as it was when the backup was taken
        metrics = f"/api/v1/jobs/{finished['id']}/metrics/"
        assert http.get(metrics).json() == cluster.api.get(metrics).json()
        original = job(cluster, finished["id"])
        assert http.get(f"/api/v1/jobs/{finished['id']}/").json()["tasks"] == original["tasks"]
    finally:
        if group is not None:
            group.stop()
        fresh.remove()
    with capsys.disabled():
        size = dump.stat().st_size
        print(f"\npg_dump mid-run: {size / 1024:.0f} KiB, restored and served {len(jobs_now)} jobs")
