"""The agent gateway under load: N simulated agents against a real server.

    .venv/bin/python bench/telemetry.py [--agents 100,300,1000] [--senders 20]
        [--seconds 30] [--workers 2]

Per case, on PostgreSQL and Redis instances of its own (`tests/instances.py`: initdb +
pg_ctl and redis-server on free loopback ports, never the shared ones):
- migrates, enrolls `--agents` nodes, gives `--senders` of them a running task each, and
  loads one job with a 1,000,000-point series (as `bench/job_page.py` does: as chunks);
- starts the server as `trainhub web --workers N` does (uvicorn, one shared port);
- connects every agent over a real WebSocket (`/ws/agent/`, its node credential); each
  sends a numbered heartbeat every 5 s (first one at a random offset) and times it to
  the `ack` that covers it; each sender streams columnar metric batches of 1,000 points
  (two in flight at most, as fast as they are acknowledged; `telemetry_agents.py`); the
  nodes start as seen just before, and the measured window opens once every agent has
  had a heartbeat acknowledged (`connect_s`: how long that took);
- halfway through, reads the 1M-point series with `max_points=1000` over HTTP (time,
  bytes, and the web processes' peak memory);
- every 2 s counts the simulated nodes the platform would call lost (no heartbeat within
  `TRAINHUB_NODE_LOST_AFTER`);
- after the run, the chunk table's PostgreSQL size (table, indexes, TOAST) per point
  stored, and the encoded bytes per point of the ingested series and of the 1M series.

Prints `{"cases": [{"agents", "connect_s", "heartbeat_rtt_ms": {"p50", "p99", "max"},
"heartbeats", "ingest_points_per_s", "refused", "nodes_marked_lost", "read_1m": {...},
"storage": {"bytes_per_point", "by_series": {...}, ...}}]}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT), str(ROOT / "bench")]

from telemetry_agents import Stats, _agent  # noqa: E402
from telemetry_measures import (  # noqa: E402
    _cpu_s,
    _peak_rss_mb,
    _postgres_pids,
    _web_pids,
    chunk_storage,
)

from tests.instances import free_port, instances  # noqa: E402

__all__ = ["Stats", "_agent", "_cpu_s", "_web_pids", "simulated_nodes"]  # cluster_capacity
SERIES_POINTS = 1_000_000
PASSWORD = "bench-password-1"


def simulated_nodes(
    username: str, team_slug: str, agents: int, senders: int
) -> tuple[Any, list[str], list[dict[str, int]]]:
    """A member of a new team; `agents` enrolled nodes and their credentials; a running
    worker task (its key) on each of the first `senders` nodes, to stream metrics for."""
    from trainhub.jobs.models import Job, Task
    from trainhub.tenancy.choices import Role

    from tests.trainhub.factories import make_node, make_team, make_user, spec

    user = make_user(username)
    team = make_team(team_slug, members={user: Role.MEMBER})
    credentials, nodes = [], []
    for i in range(agents):
        node, credential = make_node(f"sim-{i:04d}", cpus=8, memory_mb=32768)
        credentials.append(credential)
        nodes.append(node)
    tasks = []
    for i in range(senders):
        job = Job.objects.create(
            team=team, name=f"sender-{i}", submitted_by=user, spec=spec(), state="running"
        )
        task = Task.objects.create(
            job=job, role="worker", index=0, cpu=0.5, memory_mb=512, node=nodes[i],
            state="running", attempt=1,
        )  # fmt: skip
        tasks.append({"id": task.pk, "attempt": 1})
    return user, credentials, tasks


def _setup(agents: int, senders: int) -> tuple[list[str], list[dict[str, int]], int]:
    """Nodes and their credentials, the senders' task keys, the 1M-point job's id."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection
    from job_page import _load_job

    alice, credentials, tasks = simulated_nodes("alice", "recsys", agents, senders)
    alice.set_password(PASSWORD)
    alice.save()
    big = _load_job(alice, SERIES_POINTS, names=("loss",))  # one series of 1M points
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    connection.close()
    return credentials, tasks, big


def _lost_count(lost_after: float) -> int:
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone
    from trainhub.nodes.models import Node

    count = Node.objects.filter(
        last_seen__lt=timezone.now() - timedelta(seconds=lost_after)
    ).count()
    connection.close()
    return count


def _nodes_seen_now() -> None:
    """Nodes as they are when a web process restarts: seen moments ago, not at setup."""
    from django.db import connection
    from django.utils import timezone
    from trainhub.nodes.models import Node

    Node.objects.update(last_seen=timezone.now())
    connection.close()


async def _read_series(base: str, job_id: int) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        token = (
            await client.post(
                "/api/v1/auth/token/", json={"username": "alice", "password": PASSWORD}
            )
        ).json()["token"]
        t0 = time.perf_counter()
        response = await client.get(
            f"/api/v1/jobs/{job_id}/metrics/",
            params={"max_points": 1000},
            headers={"Authorization": f"Token {token}", "Accept-Encoding": "identity"},
        )
        ms = (time.perf_counter() - t0) * 1000
        # What a browser downloads: the same answer, gzip-encoded.
        zipped = await client.get(
            f"/api/v1/jobs/{job_id}/metrics/",
            params={"max_points": 1000},
            headers={"Authorization": f"Token {token}", "Accept-Encoding": "gzip"},
        )
    response.raise_for_status()
    series = response.json()["series"]
    return {
        "ms": round(ms, 1),
        "bytes": len(response.content),
        "bytes_gzip": zipped.num_bytes_downloaded,
        "buckets": {name: len(points) for name, points in series.items()},
    }


async def _drive(
    base: str,
    credentials: list[str],
    tasks: list[dict[str, int]],
    big: int,
    seconds: float,
    web_pid: int,
    lost_after: float,
) -> dict[str, Any]:
    stats = Stats()
    stop = asyncio.Event()
    ws_url = base.replace("http://", "ws://") + "/ws/agent/"
    agents = [
        asyncio.create_task(_agent(ws_url, c, tasks[i] if i < len(tasks) else None, stop, stats))
        for i, c in enumerate(credentials)
    ]
    # The window opens once every agent has had a heartbeat acknowledged: it measures
    # the steady state, and `connect_s` says how long 1,000 sockets took to get there.
    connect0 = time.perf_counter()
    while len(stats.beating) < len(credentials) and time.perf_counter() - connect0 < 120:
        await asyncio.sleep(0.2)
    connect_s = time.perf_counter() - connect0
    stats.rtts.clear()
    stats.quiet_rtts.clear()
    groups = {
        "web": _web_pids(web_pid),
        "postgres": await asyncio.to_thread(_postgres_pids),
        "simulator": [os.getpid()],
    }
    cpu0 = {name: _cpu_s(pids) for name, pids in groups.items()}
    start_points, t0 = stats.points_acked, time.perf_counter()
    read: dict[str, Any] = {}
    lost_during_read = 0
    while time.perf_counter() - t0 < seconds:
        if not read and time.perf_counter() - t0 > seconds / 2:
            read = await _read_series(base, big)
            lost_during_read = await asyncio.to_thread(_lost_count, lost_after)
        stats.lost_max = max(stats.lost_max, await asyncio.to_thread(_lost_count, lost_after))
        await asyncio.sleep(2)
    elapsed = time.perf_counter() - t0
    ingested = stats.points_acked - start_points
    groups["postgres"] = await asyncio.to_thread(_postgres_pids)  # backends come and go
    cpu = {name: round((_cpu_s(pids) - cpu0[name]) / elapsed, 2) for name, pids in groups.items()}
    stop.set()
    results = await asyncio.gather(*agents, return_exceptions=True)
    failures = [repr(r) for r in results if isinstance(r, BaseException)]
    rtts, quiet = sorted(stats.rtts), sorted(stats.quiet_rtts)
    read["peak_rss_mb"] = _peak_rss_mb(_web_pids(web_pid))
    read["nodes_marked_lost_during_read"] = lost_during_read
    return {
        "agents": len(credentials),
        "senders": len(tasks),
        "connect_s": round(connect_s, 1),
        "heartbeat_rtt_ms": {
            "p50": round(statistics.median(rtts), 1) if rtts else None,
            "p99": round(rtts[int(len(rtts) * 0.99) - 1], 1) if rtts else None,
            "max": round(rtts[-1], 1) if rtts else None,
        },
        # The same for the agents that send only heartbeats.
        "heartbeat_rtt_ms_quiet": {
            "p50": round(statistics.median(quiet), 1) if quiet else None,
            "p99": round(quiet[int(len(quiet) * 0.99) - 1], 1) if quiet else None,
        },
        "heartbeats": len(rtts),
        "ingest_points_per_s": round(ingested / elapsed),
        "refused": stats.refused,
        "nodes_marked_lost": stats.lost_max,
        "agent_failures": failures[:5],
        # Cores each part kept busy over the window (2 on this machine in all).
        "cpu_cores": cpu,
        "read_1m": read,
    }


def run_case(agents: int, senders: int, seconds: float, workers: int) -> dict[str, Any]:
    with instances() as inst:
        os.environ.update(
            DATABASE_URL=inst.database_url,
            REDIS_URL=inst.redis_url,
            DJANGO_SETTINGS_MODULE="trainhub.settings",
        )
        credentials, tasks, big = _setup(agents, senders)
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}",
            "TRAINHUB_DB_POOL_SIZE": os.environ.get("TRAINHUB_DB_POOL_SIZE", "8"),
        }
        from trainhub.standalone.processes import web_command

        command = [*web_command("127.0.0.1", port), "--workers", str(workers)]
        web = subprocess.Popen([*command, "--log-level", "warning"], env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_http(f"{base}/healthz")
            _nodes_seen_now()
            from django.conf import settings

            result = asyncio.run(
                _drive(
                    base,
                    credentials,
                    tasks,
                    big,
                    seconds,
                    web.pid,
                    settings.NODE_LOST_AFTER_SECONDS,
                )
            )
            from trainhub.jobs.models import Task

            ids = [t["id"] for t in tasks]
            jobs = list(Task.objects.filter(pk__in=ids).values_list("job_id", flat=True))
            result["storage"] = chunk_storage({"ingested": jobs, "series_1m": [big]})
            return result
        finally:
            web.terminate()
            web.wait(30)


def _wait_http(url: str, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="100,300,1000")
    parser.add_argument("--senders", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    cases = []
    for agents in [int(a) for a in args.agents.split(",")]:
        # Each case in a process of its own: Django is set up once per database.
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--case",
                str(agents),
                str(args.senders),
                str(args.seconds),
                str(args.workers),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(f"case {agents} failed:\n{out.stderr[-4000:]}")
        cases.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(cases[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"workers": args.workers, "cases": cases}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--case":
        agents, senders, seconds, workers = sys.argv[2:]
        print(json.dumps(run_case(int(agents), int(senders), float(seconds), int(workers))))
    else:
        main()
