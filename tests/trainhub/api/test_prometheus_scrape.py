"""A real Prometheus scrapes `/metrics` of a two-process web server while a scheduling
cycle runs in a third process (`trainhub manage schedule`) and an agent holds its socket:
multiprocess mode sums them all, and a scrape without the token is refused.

Prometheus is Debian's `prometheus` package (`.ci/run` installs it); outside CI a machine
without it skips this test, under CI it fails.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from trainhub.standalone.processes import child_env
from trainhub.tenancy.choices import Role
from websockets.asyncio.client import connect

from ...conftest import IN_CI
from ...e2e.cluster import free_port
from ..factories import make_job, make_node, make_team, make_user
from .conftest import database_url, live_web

TOKEN = "scrape-token-0123456789"


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if IN_CI:
            pytest.fail("prometheus is not installed (Debian: apt-get install prometheus)")
        pytest.skip("needs the prometheus binary (Debian: apt-get install prometheus)")
    return found


def _config(path: Path, target: str) -> Path:
    host = target.removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "trainhub",
                "authorization": {"type": "Bearer", "credentials": TOKEN},
                "static_configs": [{"targets": [host]}],
            },
            {"job_name": "anonymous", "static_configs": [{"targets": [host]}]},
        ],
    }
    path.write_text(json.dumps(config))  # YAML is a superset of JSON
    return path


def _query(url: str, expr: str) -> dict[str, float]:
    found = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()
    return {
        json.dumps(r["metric"], sort_keys=True): float(r["value"][1])
        for r in found["data"]["result"]
    }


def _wait_ready(url: str, prometheus: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert prometheus.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError("Prometheus not ready after 60 s: " + log.read_text()[-3000:])


def _wait_for(url: str, expr: str, want: float, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        seen = _query(url, expr)
        if seen and all(v == want for v in seen.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"{expr}: wanted {want}, Prometheus has {seen}")


def test_prometheus_scrapes_every_process(transactional_db: Any, tmp_path: Path) -> None:
    binary = _prometheus()
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192)
    _, credential = make_node(cpus=4, memory_mb=8192)
    make_job(alice)
    shared = tmp_path / "prometheus-dir"
    shared.mkdir()
    extra = {"PROMETHEUS_MULTIPROC_DIR": str(shared), "TRAINHUB_METRICS_TOKEN": TOKEN}
    with live_web(tmp_path, **extra) as web:
        env = child_env({**extra, "DATABASE_URL": database_url()})
        env.pop("REDIS_URL", None)
        subprocess.run(
            [sys.executable, "-m", "trainhub.cli", "manage", "schedule"],
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        port = free_port()
        prometheus = subprocess.Popen(
            [
                binary,
                f"--config.file={_config(tmp_path / 'prometheus.yml', web)}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("wb"),
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, prometheus, tmp_path / "prometheus.log")
            asyncio.run(_with_an_agent(web, credential, url))
            _wait_for(url, 'up{job="trainhub"}', 1)
            _wait_for(url, 'up{job="anonymous"}', 0)  # refused: no token
            _wait_for(url, 'trainhub_jobs{job="trainhub",state="starting",team="recsys"}', 1)
            _wait_for(url, 'trainhub_scheduling_cycle_seconds_count{job="trainhub"}', 1)
            _wait_for(url, 'trainhub_agents_connected{job="trainhub"}', 0)  # it left
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=30)


async def _with_an_agent(web: str, credential: str, prometheus: str) -> None:
    """While one agent's socket is open, Prometheus sees it connected (whichever web
    process holds it), then Prometheus is up."""
    ws = web.replace("http://", "ws://") + "/ws/agent/"
    async with connect(ws, additional_headers={"Authorization": f"Node {credential}"}):
        await asyncio.to_thread(
            _wait_for, prometheus, 'trainhub_agents_connected{job="trainhub"}', 1
        )
        await asyncio.to_thread(
            _wait_for, prometheus, 'trainhub_websocket_clients{job="trainhub",kind="agent"}', 1
        )
