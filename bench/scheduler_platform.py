"""Time the platform's whole scheduling cycle on PostgreSQL; one JSON line per size.

    .venv/bin/python bench/scheduler_platform.py [--sizes 1000x100,10000x1000] [--repeat 3]
        [--pending-sizes 1000x100,10000x1000] [--burst-sizes 10000x1000]

`bench/scheduler_scale.py` times the policy alone; this one times what Celery runs every
5 s: `run_cycle` reading the snapshot from the database, the policy, and applying the
decisions (starts with ports, growth, preemptions, pending reasons, reservations), all in
one transaction. Each size is the same synthetic steady state as scheduler_scale's (GPU and
CPU nodes, 20 teams, mixed jobs, most of the cluster running), written into a fresh
database next to $DATABASE_URL's (default postgres://postgres@127.0.0.1:5432/test), which is
dropped afterwards. Every timed cycle is rolled back, so each repeat sees the same state.
`read_s` is the snapshot read alone (`read_cluster`); `first_cycle_s` the first cycle,
committed (every pending reason is new then), and `cycle_s` the median of the
rolled-back steady cycles after it: on the process's cluster cache (`scheduling/cache.py`)
after the previous cycle's virtual runtime accrual (committed: a new version of every
running job's accrual row, `scheduling/vruntime.py`); `cycle_warm_s` the same with
nothing changed since, `cycle_before_s` with the whole cluster read instead (the path
before the cache). `dry_run_s` is the
median of `--dry-runs` (20) dry runs on a warm cache (`scheduling.preview`: version check,
policy, forecast of the start from a history of succeeded jobs, one per five active
ones), `dry_run_cold_s` the same reading the whole cluster each time, `dry_run_first_s`
the first on an empty cache. `--own-postgres` runs on a PostgreSQL of its own
(`tests/instances.py`) instead of $DATABASE_URL's server. `--pending-sizes`
times the same jobs all pending (`"all_pending": true`): the cycle that starts as many
as fit (ports, GPUs, events, each job's TLS CA) and words the rest's pending reasons,
rolled back and repeated. `--burst-sizes` runs `bench/cycle_burst.py` per size (its own
PostgreSQL, Redis and Celery worker; 1,000 cycle requests over three cycles' time) and
prints its line: how many cycles ran and how many finished after the last request.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

import psycopg  # noqa: E402
from dry_run_timing import time_dry_run  # noqa: E402
from scheduler_scale import cluster, steady_state  # noqa: E402
from trainhub.scheduling import policy  # noqa: E402


class Rollback(Exception):
    pass


def _spec(job: policy.Job) -> dict[str, Any]:
    def res(r: policy.Resources) -> dict[str, Any]:
        return {"cpu": r.cpu, "memory_mb": int(r.memory_mb), "gpu": int(r.gpu)}

    return {
        "name": f"job-{job.id}",
        "team": job.team,
        "priority": job.priority,
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {},
        "parameter_servers": {"replicas": job.ps_count, "resources": res(job.ps)},
        "workers": {"min": job.workers_min, "max": job.workers_max, "resources": res(job.worker)},
        "coordinator": {"resources": res(job.coordinator)},
        "freeze_seconds": int(job.freeze_seconds),
        "checkpoint_every_seconds": 300,
        "max_restarts": 0,
    }


def populate(snap: policy.Snapshot, now: datetime) -> None:
    from trainhub.jobs.choices import JobState, TaskState
    from trainhub.jobs.models import Job, Task
    from trainhub.nodes.models import Node
    from trainhub.tenancy.models import Quota, Team

    Node.objects.bulk_create(
        Node(
            id=n.id,
            hostname=f"node-{n.id}",
            address=f"10.0.{n.id // 250}.{n.id % 250}",
            cpus=n.capacity.cpu,
            memory_mb=int(n.capacity.memory_mb),
            gpus=[{"index": i, "model": "A100"} for i in range(int(n.capacity.gpu))],
            credential_hash="-",
            last_seen=now,
        )
        for n in snap.nodes
    )
    teams = {t.name: Team.objects.create(slug=t.name, name=t.name) for t in snap.teams}
    Quota.objects.bulk_create(
        Quota(
            team=teams[t.name],
            cpu=t.nominal.cpu,
            memory_mb=int(t.nominal.memory_mb),
            gpu=int(t.nominal.gpu),
        )
        for t in snap.teams
    )
    Job.objects.bulk_create(
        Job(
            id=j.id,
            team=teams[j.team],
            name=f"job-{j.id}",
            priority=j.priority,
            spec=_spec(j),
            state=JobState.RUNNING if j.state == policy.RUNNING else JobState.PENDING,
            runtime_token="-",
            started_at=now - timedelta(seconds=600) if j.state == policy.RUNNING else None,
            last_rescale_at=now - timedelta(seconds=600) if j.state == policy.RUNNING else None,
            vruntime=j.vruntime,
        )
        for j in snap.jobs
    )
    ports: dict[int, int] = {}
    gpus: dict[int, int] = {}  # next free GPU index per node
    tasks = []
    for j in snap.jobs:
        for t in j.tasks:
            port = None
            if t.role != policy.COORDINATOR:
                port = ports.get(t.node_id, 24000)
                ports[t.node_id] = port + 1
            first, count = gpus.get(t.node_id, 0), int(t.resources.gpu)
            gpus[t.node_id] = first + count
            tasks.append(
                Task(
                    job_id=j.id,
                    role=t.role,
                    index=t.index,
                    node_id=t.node_id,
                    port=port,
                    cpu=t.resources.cpu,
                    memory_mb=int(t.resources.memory_mb),
                    gpu_indices=list(range(first, first + count)),
                    borrowed=t.borrowed,
                    state=TaskState.RUNNING,
                )
            )
    Task.objects.bulk_create(tasks, batch_size=5000)


def add_history(snap: policy.Snapshot, now: datetime, rng: random.Random) -> None:
    """A succeeded job per 5 active ones, 10-60 min long, finished in the last day: what
    the dry run's forecast reads its expected runtimes from."""
    from trainhub.jobs.choices import JobState
    from trainhub.jobs.models import Job
    from trainhub.tenancy.models import Team

    teams = {t.slug: t for t in Team.objects.all()}
    first_id = max(j.id for j in snap.jobs) + 1
    finished = []
    for i, j in enumerate(snap.jobs[::5]):
        end = now - timedelta(seconds=rng.uniform(60, 86400))
        finished.append(
            Job(
                id=first_id + i,
                team=teams[j.team],
                name=f"job-{j.id}",
                priority=j.priority,
                spec=_spec(j),
                state=JobState.SUCCEEDED,
                runtime_token="-",
                started_at=end - timedelta(seconds=rng.uniform(600, 3600)),
                finished_at=end,
            )
        )
    Job.objects.bulk_create(finished, batch_size=5000)


def all_pending(snap: policy.Snapshot) -> policy.Snapshot:
    """The same jobs, none of them started yet (a cluster back from an outage, or the
    morning's submissions): the cycle that places as many as fit and words the rest's
    reasons."""
    jobs = tuple(
        dataclasses.replace(j, state=policy.PENDING, tasks=(), started_at=None, vruntime=0.0)
        for j in snap.jobs
    )
    return dataclasses.replace(snap, jobs=jobs)


def run_pending(n_jobs: int, n_nodes: int, repeat: int) -> dict[str, Any]:
    """Every job pending: the median of `repeat` such cycles, each rolled back."""
    from django.core.management import call_command
    from django.db import connection, transaction
    from trainhub.scheduling.services import run_cycle

    logging.getLogger("trainhub").setLevel(logging.WARNING)
    call_command("migrate", verbosity=0)
    snap = all_pending(steady_state(cluster(n_nodes, n_jobs), random.Random(1)))
    now = datetime.now(UTC)
    populate(snap, now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    cycles = []
    result = None
    for _ in range(repeat):
        try:
            with transaction.atomic():
                t0 = time.perf_counter()
                result = run_cycle(now=now)
                cycles.append(time.perf_counter() - t0)
                raise Rollback
        except Rollback:
            pass
    assert result is not None and result.ran
    return {
        "jobs": n_jobs,
        "nodes": n_nodes,
        "all_pending": True,
        "cycle_s": round(statistics.median(cycles), 3),
        "starts": len(result.decisions.starts),
        "pending": len(result.decisions.pending_reasons),
    }


def run_size(n_jobs: int, n_nodes: int, repeat: int, dry_runs: int) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection, transaction
    from trainhub.jobs.choices import JobState
    from trainhub.jobs.models import Job
    from trainhub.scheduling import services
    from trainhub.scheduling.cache import cluster_view
    from trainhub.scheduling.services import run_cycle
    from trainhub.scheduling.snapshot import read_cluster
    from trainhub.scheduling.vruntime import add_vruntime

    logging.getLogger("trainhub").setLevel(logging.WARNING)  # a cycle logs its decisions
    call_command("migrate", verbosity=0)
    snap = steady_state(cluster(n_nodes, n_jobs), random.Random(1))
    now = datetime.now(UTC)
    t0 = time.perf_counter()
    populate(snap, now)
    add_history(snap, now, random.Random(2))
    load_s = time.perf_counter() - t0
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    # The first cycle commits (most pending reasons are new then); the timed ones are the
    # steady state after it, as the beat runs them every few seconds.
    t0 = time.perf_counter()
    run_cycle(now=now)
    first_s = time.perf_counter() - t0
    cycles: list[float] = []
    warm_cycles: list[float] = []
    before_cycles: list[float] = []
    reads: list[float] = []
    result = None
    running = list(Job.objects.filter(state=JobState.RUNNING).values_list("pk", flat=True))
    for _ in range(repeat):
        # Steady: as after the previous cycle, which accrued virtual runtime to every
        # running job (`vruntime.add_vruntime`: a new version of each of their accrual
        # rows, no job row); warm: nothing changed since; before: the whole cluster read
        # (`read_cluster`).
        with transaction.atomic():
            add_vruntime([(0.001, pk) for pk in running])
        for timings, whole in ((cycles, False), (warm_cycles, False), (before_cycles, True)):
            try:
                with transaction.atomic():
                    t0 = time.perf_counter()
                    read_cluster(now)
                    reads.append(time.perf_counter() - t0)
                    if whole:
                        vars(services)["cluster_view"] = read_cluster
                    t0 = time.perf_counter()
                    result = run_cycle(now=now + timedelta(seconds=5))
                    timings.append(time.perf_counter() - t0)
                    raise Rollback
            except Rollback:
                pass
            finally:
                vars(services)["cluster_view"] = cluster_view
    assert result is not None and result.ran
    d = result.decisions
    pending = next(j for j in snap.jobs if j.state == policy.PENDING)
    dry_runs_s = time_dry_run({**_spec(pending), "name": "dry-run"}, dry_runs)
    return {
        "jobs": n_jobs,
        "nodes": n_nodes,
        "tasks": sum(len(j.tasks) for j in snap.jobs),
        "cycle_s": round(statistics.median(cycles), 3),
        "cycle_warm_s": round(statistics.median(warm_cycles), 3),
        "cycle_before_s": round(statistics.median(before_cycles), 3),
        "read_s": round(statistics.median(reads), 3),
        "first_cycle_s": round(first_s, 3),
        **dry_runs_s,
        "load_s": round(load_s, 1),
        "starts": len(d.starts),
        "grown": len(d.add_workers),
        "shrunk": len(d.remove_workers),
        "preempted": len(d.preemptions),
        "pending": len(d.pending_reasons),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000x100,10000x1000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--pending-sizes",
        default="1000x100,10000x1000",
        help="sizes to time with every job pending ('' for none)",
    )
    parser.add_argument(
        "--burst-sizes",
        default="10000x1000",
        help="sizes to flood with 1,000 cycle requests ('' for none)",
    )
    parser.add_argument("--dry-runs", type=int, default=20, help="dry runs per median")
    parser.add_argument(
        "--own-postgres",
        action="store_true",
        help="on a PostgreSQL instance of its own (tests/instances.py), not $DATABASE_URL's",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
        if args.own_postgres:
            sys.path.insert(0, str(ROOT))
            from tests.instances import postgres

            base = stack.enter_context(postgres())
        run_cases(args, base)
    for size in (s for s in args.burst_sizes.split(",") if s):
        burst = [sys.executable, str(ROOT / "bench" / "cycle_burst.py"), "--size", size]
        subprocess.run(burst, check=True)


def run_cases(args: argparse.Namespace, base: str) -> None:
    parsed = urlparse(base)
    admin_dsn = urlunparse(parsed._replace(path="/postgres"))
    sized = functools.partial(run_size, dry_runs=args.dry_runs)
    cases: list[tuple[str, Callable[[int, int, int], dict[str, Any]]]]
    cases = [(size, sized) for size in args.sizes.split(",") if size]
    cases += [(size, run_pending) for size in args.pending_sizes.split(",") if size]
    for size, run in cases:
        n_jobs, n_nodes = (int(x) for x in size.split("x"))
        name = f"trainhub_bench_{secrets.token_hex(4)}"
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            os.environ["DATABASE_URL"] = urlunparse(parsed._replace(path=f"/{name}"))
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
            import django
            from django.db import connections

            django.setup()
            connections["default"].close()
            connections["default"].settings_dict["NAME"] = name
            print(json.dumps(run(n_jobs, n_nodes, args.repeat)), flush=True)
            connections["default"].close()
        finally:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
