"""Capacity measured on the production-like cluster: what one web process, one Celery
worker and one PostgreSQL carry (docs/scaling.md).

    .venv/bin/python bench/cluster_capacity.py [--agents 500] [--senders 10]
        [--seconds 30] [--page-clients 4] [--cycle-size 10000x1000]

Starts the cluster of `tests/cluster/harness.py` (`make cluster`) without agent hosts:
private PostgreSQL and Redis, the shipped nginx configuration (TLS) in front of two
`trainhub web` processes, two Celery workers and beat, with production settings. Then:
1. agents: `--agents` simulated agents (bench/telemetry.py's: a heartbeat every 5 s,
   `--senders` of them streaming 1,000-point metric batches as fast as they are
   acknowledged) connect through nginx (wss) and run for `--seconds`: heartbeat
   round trips, points/s stored, and the cores each web process, PostgreSQL and nginx
   kept busy;
2. pages: `--page-clients` signed-in clients load the dashboard and the jobs list through
   nginx as fast as they are answered, for `--seconds`: pages/s and the web processes'
   cores;
3. cycle: the scheduling cycle a Celery worker runs (bench/scheduler_platform.py's
   `run_size`: the synthetic steady state of `--cycle-size` jobs x nodes) on a database
   of the cluster's PostgreSQL.
Prints one JSON object; the per-process figures divide by the cores measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT), str(ROOT / "bench")]

import httpx  # noqa: E402
from telemetry import Stats, _agent, _cpu_s, _web_pids, simulated_nodes  # noqa: E402

from tests.cluster.harness import Cluster, production_cluster, trusting  # noqa: E402
from tests.e2e.cluster import ADMIN  # noqa: E402


def _processes(cluster: Cluster) -> dict[str, list[int]]:
    postmaster = int((cluster.database.data / "postmaster.pid").read_text().split()[0])
    groups = {name: [cluster.group.procs[name].pid] for name in cluster.webs}
    groups["postgres"] = _web_pids(postmaster)  # the postmaster and its backends
    groups["nginx"] = _web_pids(cluster.group.procs["nginx"].pid)
    return groups


def _reaped_cpu_s(pid: int) -> float:
    """CPU seconds of the children `pid` has reaped (PostgreSQL's ended backends)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


class Cores:
    """Cores each process group kept busy between `__init__` and `read()` (PostgreSQL's
    backends that ended meanwhile included)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.start = time.perf_counter()
        self.cpu0 = self._cpu()

    def _cpu(self) -> dict[str, float]:
        groups = _processes(self.cluster)
        cpu = {name: _cpu_s(pids) for name, pids in groups.items()}
        cpu["postgres"] += _reaped_cpu_s(groups["postgres"][0])
        return cpu

    def read(self) -> dict[str, float]:
        elapsed = time.perf_counter() - self.start
        now = self._cpu()
        return {name: round((now[name] - self.cpu0[name]) / elapsed, 2) for name in now}


async def _agents(
    cluster: Cluster, credentials: list[str], tasks: list[dict[str, int]], seconds: float
) -> dict[str, Any]:
    stats, stop = Stats(), asyncio.Event()
    url = cluster.url.replace("https://", "wss://") + "/ws/agent/"
    tls = trusting(cluster.ca_bundle)
    agents = [
        asyncio.create_task(_agent(url, c, tasks[i] if i < len(tasks) else None, stop, stats, tls))
        for i, c in enumerate(credentials)
    ]
    t0 = time.perf_counter()
    while len(stats.beating) < len(credentials) and time.perf_counter() - t0 < 120:
        await asyncio.sleep(0.2)
    connect_s = time.perf_counter() - t0
    stats.rtts.clear()
    cores = Cores(cluster)
    points0, t0 = stats.points_acked, time.perf_counter()
    await asyncio.sleep(seconds)
    elapsed = time.perf_counter() - t0
    points = stats.points_acked - points0
    busy = cores.read()
    stop.set()
    results = await asyncio.gather(*agents, return_exceptions=True)
    rtts = sorted(stats.rtts)
    return {
        "agents": len(credentials),
        "senders": len(tasks),
        "connect_s": round(connect_s, 1),
        "heartbeat_rtt_ms": {
            "p50": round(statistics.median(rtts), 1) if rtts else None,
            "p99": round(rtts[int(len(rtts) * 0.99) - 1], 1) if rtts else None,
        },
        "ingest_points_per_s": round(points / elapsed),
        "refused": stats.refused,
        "agent_failures": [repr(r) for r in results if isinstance(r, BaseException)][:5],
        "cores": busy,
    }


def _pages(cluster: Cluster, clients: int, seconds: float) -> dict[str, Any]:
    counts: list[int] = [0] * clients
    failures: list[str] = []
    ready = threading.Barrier(clients + 1)
    stop = threading.Event()

    def browse(i: int) -> None:
        http = httpx.Client(base_url=cluster.url, verify=trusting(cluster.ca_bundle), timeout=30)
        form = http.get("/login/")
        token = form.text.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
        http.post(
            "/login/",
            data={"username": ADMIN[0], "password": ADMIN[1], "csrfmiddlewaretoken": token},
            headers={"Referer": f"{cluster.url}/login/"},
        )
        ready.wait()
        while not stop.is_set():
            for path in ("/", "/jobs/"):
                response = http.get(path)
                if response.status_code == 200:
                    counts[i] += 1
                else:
                    failures.append(f"{path}: {response.status_code}")

    threads = [threading.Thread(target=browse, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    cores = Cores(cluster)
    t0, before = time.perf_counter(), sum(counts)
    time.sleep(seconds)
    pages, elapsed, busy = sum(counts) - before, time.perf_counter() - t0, cores.read()
    stop.set()
    for thread in threads:
        thread.join()
    return {
        "clients": clients,
        "pages_per_s": round(pages / elapsed, 1),
        "failures": failures[:5],
        "cores": busy,
    }


def _cycle(cluster: Cluster, size: str) -> dict[str, Any]:
    from django.db import connections
    from scheduler_platform import run_size

    n_jobs, n_nodes = (int(x) for x in size.split("x"))
    name = cluster.database.create_database("cycle")
    connections["default"].close()
    connections["default"].settings_dict["NAME"] = name.rsplit("/", 1)[1]
    return run_size(n_jobs, n_nodes, repeat=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=500)
    parser.add_argument("--senders", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--page-clients", type=int, default=4)
    parser.add_argument("--cycle-size", default="10000x1000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainhub-capacity-") as tmp:
        with production_cluster(Path(tmp), agents=0) as cluster:
            env = cluster.group.env
            os.environ.update(
                DATABASE_URL=env["DATABASE_URL"],
                REDIS_URL=env["REDIS_URL"],
                DJANGO_SETTINGS_MODULE="trainhub.settings",
            )
            import django

            django.setup()
            _, credentials, tasks = simulated_nodes("bench", "bench", args.agents, args.senders)
            print("agents…", file=sys.stderr, flush=True)
            agents = asyncio.run(_agents(cluster, credentials, tasks, args.seconds))
            print(json.dumps(agents), file=sys.stderr, flush=True)
            print("pages…", file=sys.stderr, flush=True)
            pages = _pages(cluster, args.page_clients, args.seconds)
            print(json.dumps(pages), file=sys.stderr, flush=True)
            print("cycle…", file=sys.stderr, flush=True)
            cycle = _cycle(cluster, args.cycle_size) if args.cycle_size else None
    print(
        json.dumps({"web_processes": 2, "agents": agents, "pages": pages, "cycle": cycle}, indent=2)
    )


if __name__ == "__main__":
    main()
