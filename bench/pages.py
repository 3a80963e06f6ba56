"""Server time of the main web pages at scale (issue 12, "Done means" 3); prints JSON.

    .venv/bin/python bench/pages.py [--jobs 10000] [--nodes 100] [--teams 20]
                                    [--requests 20] [--warmup 3]

Fills a fresh PostgreSQL database next to $DATABASE_URL's (default
postgres://postgres@127.0.0.1:5432/test; dropped afterwards) with a realistic cluster:
`--teams` teams with quotas and a few members each, `--nodes` nodes (a fifth with GPUs; a
few cordoned, draining or lost), `--jobs` jobs — most finished (with their finished tasks),
a few hundred running with tasks on the nodes, a few hundred pending with pending reasons,
several events per job — and, for the running job that is measured, 300 events
(rescales, restarts, a few checkpoints), 30k metric points and 20k log lines.

Each page is then asked for through Django's test `Client`, in process: the time is the
server's (URL routing, middleware, session, view, queries, template), with no network and
no HTTP server. The test Client keeps the database connection open between requests;
`connect_ms` says what opening one costs here, which a server that opens one per request
(CONN_MAX_AGE 0, today's setting) adds to each page. Every page is asked for as a
platform admin and as a member of 3 of the teams (with, beside the four pages of the
goal, a pending job's page, the queue-position fragment it loads, and the API's job
list); `median_ms`/`p90_ms` over `--requests` requests after `--warmup`, `queries`
counted on one extra request. Goal: each of the four pages ≤ 300 ms median
(`all_within_goal`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from pages_world import populate  # noqa: E402

GOAL_MS = 300


def measure(client: Any, path: str, requests: int, warmup: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(warmup):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
    times = []
    size = 0
    for _ in range(requests):
        t0 = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        size = len(response.content)
    with CaptureQueriesContext(connection) as captured:
        client.get(path)
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 1),
        "p90_ms": round(times[max(0, round(0.9 * len(times)) - 1)], 1),
        "queries": len(captured),
        "bytes": size,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    logging.getLogger("trainhub").setLevel(logging.WARNING)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    call_command("migrate", verbosity=0)
    now = datetime.now(UTC)
    t0 = time.perf_counter()
    world = populate(args.jobs, args.nodes, args.teams, now)
    load_s = time.perf_counter() - t0

    paths = [
        ("/", "dashboard"),
        ("/jobs/", "jobs"),
        (f"/jobs/{world.running_job}/", "running job"),
        ("/nodes/", "nodes"),
        (f"/jobs/{world.pending_job}/", "pending job"),
        (f"/jobs/{world.pending_job}/queue/", "pending job's queue fragment"),
        ("/api/v1/jobs/", "API job list"),
    ]
    pages = []
    for user_name, user in (("admin", world.admin), ("member", world.member)):
        client = Client()
        client.force_login(user)
        for path, what in paths:
            result = measure(client, path, args.requests, args.warmup)
            pages.append({"path": path, "page": what, "user": user_name, **result})

    connects = []
    for _ in range(10):
        connection.close()
        t0 = time.perf_counter()
        connection.ensure_connection()
        connects.append((time.perf_counter() - t0) * 1000)
    main = [p for p in pages if p["page"] in ("dashboard", "jobs", "running job", "nodes")]
    return {
        "setup": {
            **world.counts,
            "load_s": round(load_s, 1),
            "requests": args.requests,
            "warmup": args.warmup,
            "how": "Django test Client in process (server time: routing, middleware, session, "
            "view, SQL, template; no HTTP server, connection kept open)",
            "connect_ms": round(statistics.median(connects), 1),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
        },
        "goal_ms": GOAL_MS,
        "all_within_goal": all(p["median_ms"] <= GOAL_MS for p in main),
        "pages": pages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    from tests.e2e.cluster import fresh_database

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
    with fresh_database(base) as database_url:
        os.environ["DATABASE_URL"] = database_url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
        import django
        from django.db import connections

        django.setup()
        print(json.dumps(run(args)), flush=True)
        connections["default"].close()


if __name__ == "__main__":
    main()
