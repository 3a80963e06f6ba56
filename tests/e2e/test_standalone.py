"""`trainhub standalone`: one command, SQLite, embedded broker, a local agent — and a job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .cluster import free_port, job_processes, task_port_range

pytestmark = pytest.mark.slow


def test_standalone_runs_a_job_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        TRAINHUB_DATA_DIR=str(tmp_path / "var"),
        TRAINHUB_ADMIN_PASSWORD="pw-standalone",
        **task_port_range(),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainhub.cli", "standalone", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        banner = _read_until(proc, "TrainHub is up at", timeout=90)
        assert f"{url}/" in banner
        token = httpx.post(
            f"{url}/api/v1/auth/token/", json={"username": "admin", "password": "pw-standalone"}
        ).json()["token"]
        api = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Token {token}"})
        assert httpx.get(f"{url}/readyz").json() == {"status": "ok"}  # anonymous: no details
        ready = httpx.get(f"{url}/readyz", headers=api.headers).json()
        assert ready["checks"] == {"database": "ok", "broker": "ok"}
        job = api.post(
            "/jobs/",
            json={
                "name": "standalone-mf",
                "team": "default",
                "entrypoint": "ps_runtime.examples.movielens:train",
                "args": {"epochs": 2},
                "parameter_servers": {"replicas": 1, "resources": {"cpu": 0.5, "memory_mb": 512}},
                "workers": {"min": 1, "resources": {"cpu": 0.5, "memory_mb": 512}},
                "coordinator": {"resources": {"cpu": 0.5, "memory_mb": 512}},
            },
        ).json()
        deadline = time.monotonic() + 180
        state = job["state"]
        while state not in {"succeeded", "failed", "cancelled"} and time.monotonic() < deadline:
            time.sleep(0.5)
            state = api.get(f"/jobs/{job['id']}/").json()["state"]
        assert state == "succeeded", api.get(f"/jobs/{job['id']}/logs/").text[-3000:]
        series = api.get(f"/jobs/{job['id']}/metrics/").json()["series"]
        assert len(series["test_rmse"]) == 2
        assert (tmp_path / "var" / "trainhub.sqlite3").exists()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert job_processes(job["id"]) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> str:
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError("standalone did not come up:\n" + "".join(seen))
