"""Time to first chart on the job page, and the metrics response, for big series.

    .venv/bin/python bench/job_page.py [--points 10000,100000,1000000] [--repeat 3]

Creates a fresh PostgreSQL database next to $DATABASE_URL's (default
postgres://postgres@127.0.0.1:5432/test), dropped afterwards, and in it one job per case
with two metrics (`loss`, `acc`) of that many points each. Points are stored as ingest
stores them — raw rows (by COPY, in place of the agent path's bulk insert) and the rollups
folded in by `telemetry.services.store_rollups`, one batch of 10,000 steps at a time.
Then it starts a real server (`trainhub web`: uvicorn on a free port) and opens each job
page signed in, in Debian's headless Chromium (Playwright, 1280x900), `--repeat` times:

- `first_chart_ms`: from navigation start to the first frame after a chart holds points
  (`[data-metric]` with `data-points > 0` and its canvas drawn);
- `metrics_bytes`: the body of the metrics response the page asked for, uncompressed
  (`metrics_wire_bytes`: as sent, gzipped);
- `metrics_server_ms`: the time to first byte of that request made alone from the page
  once it is quiet (the server's work; loopback), `metrics_in_page_ms` the same during
  the page load, when it shares the server with the page's other requests;
- `max_points`: what the page asked for (about one per pixel of the chart).

Medians over the repeats; prints `{"cases": [...]}`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

BATCH_STEPS = 10_000
LONE_REQUESTS = 3
PASSWORD = "bench-password-1"

# Set on the first mutation that leaves a chart with points; the frame after it is drawn.
FIRST_CHART_PROBE = """
window.__firstChart = null;
new MutationObserver((_records, observer) => {
  const drawn = [...document.querySelectorAll("[data-metric]")].some(
    (el) => Number(el.dataset.points) > 0 && el.querySelector("canvas"));
  if (!drawn) return;
  observer.disconnect();
  requestAnimationFrame(() => { window.__firstChart = performance.now(); });
}).observe(document, {subtree: true, childList: true, attributes: true,
                     attributeFilter: ["data-points"]});
"""


def _load_job(user: Any, points: int, names: tuple[str, ...] = ("loss", "acc")) -> int:
    """A running job with `points` steps of each of `names` (`loss`, `acc`); returns its id."""
    from trainhub.jobs.models import Job, Task
    from trainhub.telemetry.services import write_points

    from tests.trainhub.factories import spec

    job = Job.objects.create(
        team_id=user.memberships.get().team_id,
        name=f"bench-{points}",
        submitted_by=user,
        spec=spec(name=f"bench-{points}"),
        state="running",
        runtime_token="-",
    )
    task = Task.objects.create(job=job, role="worker", index=0, cpu=0.5, memory_mb=512)
    now = datetime.now(UTC)
    # Stored as ingest stores a batch (chunks, series, rollups), BATCH_STEPS at a time.
    for start in range(0, points, BATCH_STEPS):
        batch = []
        for step in range(start, min(points, start + BATCH_STEPS)):
            if "loss" in names:
                batch.append(("loss", step, 2.0 / math.sqrt(step + 1) + 0.05 * math.sin(step)))
            if "acc" in names:
                batch.append(("acc", step, 1.0 - 1.0 / math.sqrt(step + 1)))
        write_points(job.pk, batch, task_id=task.pk, time=now)
    return job.pk


def _setup(points: list[int]) -> tuple[dict[int, int], float]:
    """Migrate, create the people and one job per case; returns {points: job id}."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection
    from trainhub.tenancy.choices import Role

    from tests.trainhub.factories import make_team, make_user

    alice = make_user("alice")
    alice.set_password(PASSWORD)
    alice.save()
    make_team("recsys", members={alice: Role.MEMBER})
    t0 = time.perf_counter()
    jobs = {n: _load_job(alice, n) for n in points}
    load_s = time.perf_counter() - t0
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    connection.close()
    return jobs, load_s


def _measure(page: Any, url: str) -> dict[str, Any]:
    page.goto(url)
    page.wait_for_function("window.__firstChart !== null", timeout=60_000)
    return dict(
        page.evaluate(
            """async (lone) => {
              const entries = () => performance.getEntriesByType("resource")
                .filter((e) => e.name.includes("/metrics/"));
              const m = entries()[0];
              // The same request alone, once the page is quiet: the server's own time.
              for (let i = 0; i < lone; i += 1) {
                const r = await fetch(m.name, {cache: "no-store", credentials: "same-origin"});
                await r.arrayBuffer();
              }
              const alone = entries().slice(1).map((e) => e.responseStart - e.requestStart);
              return {first: window.__firstChart, url: m.name, bytes: m.decodedBodySize,
                      wire: m.encodedBodySize, ttfb: m.responseStart - m.requestStart, alone};
            }""",
            LONE_REQUESTS,
        )
    )


def _run(url: str, jobs: dict[int, int], repeat: int) -> list[dict[str, Any]]:
    from playwright.sync_api import sync_playwright

    from tests.e2e.browser import CHROMIUM_FLAGS, chromium_path, sign_in

    cases = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_init_script(FIRST_CHART_PROBE)
        page = context.new_page()
        sign_in(page, url, "alice", PASSWORD)
        for points, job_id in jobs.items():
            page.goto(f"{url}/jobs/{job_id}/")  # warm: templates, static files, connections
            runs = [_measure(page, f"{url}/jobs/{job_id}/") for _ in range(repeat)]
            cases.append(
                {
                    "points_per_metric": points,
                    "first_chart_ms": round(statistics.median(r["first"] for r in runs), 1),
                    "metrics_bytes": int(statistics.median(r["bytes"] for r in runs)),
                    "metrics_wire_bytes": int(statistics.median(r["wire"] for r in runs)),
                    "metrics_server_ms": round(
                        statistics.median(t for r in runs for t in r["alone"]), 1
                    ),
                    "metrics_in_page_ms": round(statistics.median(r["ttfb"] for r in runs), 1),
                    "max_points": int(runs[0]["url"].rsplit("max_points=", 1)[1].split("&")[0]),
                    "first_chart_ms_runs": [round(r["first"], 1) for r in runs],
                }
            )
        browser.close()
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    points = [int(x) for x in args.points.split(",")]

    from trainhub.standalone.processes import ProcessGroup, child_env, wait_http_ok, web_command

    from tests.e2e.cluster import free_port, fresh_database

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
    with fresh_database(base) as database_url, tempfile.TemporaryDirectory() as tmp:
        os.environ.pop("REDIS_URL", None)  # no Redis: in-memory channel layer, no Celery
        os.environ["DATABASE_URL"] = database_url
        os.environ["TRAINHUB_DATA_DIR"] = str(Path(tmp) / "data")  # static root, no SQLite
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
        jobs, load_s = _setup(points)
        port = free_port()
        data_dir = str(Path(tmp) / "data")
        env = child_env({"DATABASE_URL": database_url, "TRAINHUB_DATA_DIR": data_dir})
        group = ProcessGroup(env=env, log_dir=Path(tmp) / "logs")
        group.start("web", web_command("127.0.0.1", port))
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http_ok(f"{url}/healthz", timeout=60, procs=group)
            cases = _run(url, jobs, args.repeat)
        finally:
            group.stop()
    print(json.dumps({"cases": cases, "load_s": round(load_s, 1)}))


if __name__ == "__main__":
    main()
