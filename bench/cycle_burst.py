"""A burst of scheduling-cycle requests against a real Celery worker: how far behind do
cycles fall? One JSON line.

    .venv/bin/python bench/cycle_burst.py [--size 10000x1000] [--requests 1000]

Starts PostgreSQL and Redis instances of its own (`tests/instances.py`: initdb + pg_ctl
and redis-server on free loopback ports, never the shared ones), writes the synthetic
steady state of `scheduler_platform.py` at `--size`, starts one Celery worker (`trainhub
worker`'s command, no beat: only requested cycles run), lets it run one cycle, then sends
`--requests` cycle requests (`scheduling.triggers`, what every event that calls for a
cycle does) spread evenly over three cycles' time, and watches the cycles run (each
commits its start time in `CycleRecord`) until none is queued. `behind_after_burst`: the
cycles that finished after the last request (the one running then and the one queued
behind it; the merging rule's promise is at most 2); `cycles` how many ran for all the
requests. Run by `scheduler_platform.py --burst-sizes`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT / "bench"), str(ROOT)]

from tests.instances import instances  # noqa: E402


def _cycle_starts() -> datetime | None:
    from trainhub.scheduling.models import CycleRecord

    return CycleRecord.objects.values_list("ran_at", flat=True).first()


_heard = 0.0


def _heartbeats() -> None:
    """Every node's agent was heard from now (every 2 s, as live agents are): otherwise
    the nodes written at the start go lost and the cycles fail their tasks."""
    global _heard
    if time.monotonic() - _heard < 2:
        return
    _heard = time.monotonic()
    from trainhub.nodes.models import Node

    Node.objects.update(last_seen=datetime.now(UTC))


def _wait_for_cycle(after: datetime | None, timeout: float) -> datetime:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _heartbeats()
        ran = _cycle_starts()
        if ran is not None and (after is None or ran > after):
            return ran
        time.sleep(0.02)
    raise TimeoutError(f"no scheduling cycle ran within {timeout:.0f} s")


def run(size: str, requests: int) -> dict[str, object]:
    n_jobs, n_nodes = (int(x) for x in size.split("x"))
    with instances() as inst:
        os.environ.update(
            DATABASE_URL=inst.database_url,
            REDIS_URL=inst.redis_url,
            DJANGO_SETTINGS_MODULE="trainhub.settings",
            TRAINHUB_SCHEDULING_DEBOUNCE="0.5",
        )
        import django

        django.setup()
        import logging

        from django.core.management import call_command
        from scheduler_platform import populate
        from scheduler_scale import cluster, steady_state
        from trainhub.scheduling import triggers
        from trainhub.scheduling.models import CycleRecord
        from trainhub.standalone.processes import child_env, worker_command

        logging.getLogger("trainhub").setLevel(logging.WARNING)
        call_command("migrate", verbosity=0)
        populate(steady_state(cluster(n_nodes, n_jobs), random.Random(1)), datetime.now(UTC))
        CycleRecord.objects.all().delete()  # the first cycle below is the worker's
        log = Path(os.environ.get("TMPDIR", "/tmp")) / "trainhub-cycle-burst-worker.log"
        print(f"worker log: {log}", file=sys.stderr)
        worker = subprocess.Popen(
            worker_command(),
            env=child_env({}),
            stdout=subprocess.DEVNULL,
            stderr=open(log, "w"),
        )
        try:
            t0 = time.perf_counter()
            triggers._queue_cycle()
            first = _wait_for_cycle(None, 300)
            warm_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            triggers._queue_cycle()
            ran = _wait_for_cycle(first, 300)
            latency_s = time.perf_counter() - t0  # debounce, queueing and the cycle
            # The burst: `requests` requests over three cycles' time.
            spread = 3 * latency_s
            seen, finished_at = [ran], []
            began = time.perf_counter()
            last_request = datetime.now(UTC)
            polled = 0.0
            for i in range(requests):
                due = began + spread * i / requests
                while time.perf_counter() < due:
                    if time.perf_counter() - polled > 0.02:
                        polled = time.perf_counter()
                        _heartbeats()
                        now = _cycle_starts()
                        if now is not None and now != seen[-1]:
                            seen.append(now)
                            finished_at.append(datetime.now(UTC))
                    time.sleep(0.001)
                triggers._queue_cycle()
            last_request = datetime.now(UTC)
            quiet_after = 2 * latency_s + 2.0
            quiet_since = time.perf_counter()
            while time.perf_counter() - quiet_since < quiet_after:
                _heartbeats()
                now = _cycle_starts()
                if now is not None and now != seen[-1]:
                    seen.append(now)
                    finished_at.append(datetime.now(UTC))
                    quiet_since = time.perf_counter()
                time.sleep(0.02)
        finally:
            worker.terminate()  # a warm shutdown: the running cycle finishes first
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    return {
        "jobs": n_jobs,
        "nodes": n_nodes,
        "requests": requests,
        "burst_s": round(spread, 2),
        "request_to_cycle_done_s": round(latency_s, 3),
        "first_cycle_s": round(warm_s, 3),
        "cycles": len(seen) - 1,
        "behind_after_burst": sum(1 for t in finished_at if t > last_request),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="10000x1000")
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    print(json.dumps(run(args.size, args.requests)), flush=True)


if __name__ == "__main__":
    main()
