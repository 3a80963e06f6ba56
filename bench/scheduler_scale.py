"""Time one fair-share scheduling cycle on synthetic clusters; one JSON line per size.

    .venv/bin/python bench/scheduler_scale.py [--sizes 1000x100,10000x1000,50000x5000]

Each size: `nodes` nodes (70 % with 8 GPUs, 30 % CPU-only), 20 teams with equal quotas
and unlimited borrowing, and `jobs` jobs of mixed priorities (60 % GPU jobs of 1-8 workers,
40 % CPU jobs with 0-2 PS shards; a third elastic). A first cycle on the empty cluster
places what fits; the timed cycle is the next one, from the resulting steady state (running
jobs holding most of the cluster, the rest pending) with 1 % of the jobs finished, so it
starts, grows, reclaims and explains. `cycle_s` is the median of `--repeat` runs and
`cycle_min_s` the fastest (the least disturbed by other load on the machine).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platform"))

from trainhub.scheduling.policy import (
    PENDING,
    RUNNING,
    Job,
    Node,
    Resources,
    Snapshot,
    Task,
    Team,
    schedule,
)

PRIORITIES = ["experiment", "offline", "normal", "normal", "production"]


def cluster(n_nodes: int, n_jobs: int, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    nodes = []
    for i in range(n_nodes):
        if i % 10 < 7:
            nodes.append(Node(i + 1, Resources(96, 786432, 8)))
        else:
            nodes.append(Node(i + 1, Resources(64, 262144, 0)))
    total = Resources()
    for n in nodes:
        total = total + n.capacity
    teams = tuple(Team(f"team-{t:02d}", total.times(1 / 20)) for t in range(20))
    jobs = []
    for j in range(n_jobs):
        gpu_job = rng.random() < 0.6
        mn = rng.choice([1, 1, 2, 4, 8]) if gpu_job else rng.choice([1, 2, 4])
        elastic = rng.random() < 0.33
        jobs.append(
            Job(
                id=j + 1,
                team=teams[rng.randrange(20)].name,
                priority=rng.choice(PRIORITIES),
                state=PENDING,
                submit_time=float(j),
                worker=Resources(4, 32768, 1) if gpu_job else Resources(2, 8192, 0),
                workers_min=mn,
                workers_max=mn * 2 if elastic else mn,
                ps_count=0 if gpu_job else rng.choice([0, 1, 2]),
                ps=Resources(1, 4096, 0),
                coordinator=Resources(0.5, 1024, 0),
                freeze_seconds=120,
            )
        )
    return Snapshot(0.0, tuple(nodes), teams, tuple(jobs))


def steady_state(first: Snapshot, rng: random.Random) -> Snapshot:
    """Apply the first cycle's decisions, finish 1 % of the running jobs, move the clock."""
    d = schedule(first)
    placed = {s.job_id: s for s in d.starts}
    jobs = []
    for job in first.jobs:
        s = placed.get(job.id)
        if s is None:
            jobs.append(replace(job, vruntime=rng.random()))
            continue
        if rng.random() < 0.01:
            continue  # finished
        tasks = tuple(Task(p.role, p.index, p.node_id, p.resources, p.borrowed) for p in s.tasks)
        jobs.append(
            replace(
                job,
                state=RUNNING,
                tasks=tasks,
                started_at=0.0,
                last_rescale_time=0.0,
                vruntime=rng.random(),
            )
        )
    return replace(first, now=600.0, jobs=tuple(jobs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000x100,10000x1000,50000x5000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for size in args.sizes.split(","):
        n_jobs, n_nodes = (int(x) for x in size.split("x"))
        first = cluster(n_nodes, n_jobs)
        t0 = time.perf_counter()
        snap = steady_state(first, random.Random(1))
        first_cycle = time.perf_counter() - t0
        timings = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            d = schedule(snap)
            timings.append(time.perf_counter() - t0)
        running = sum(1 for j in snap.jobs if j.state == RUNNING)
        print(
            json.dumps(
                {
                    "jobs": n_jobs,
                    "nodes": n_nodes,
                    "cycle_s": round(statistics.median(timings), 4),
                    "cycle_min_s": round(min(timings), 4),
                    "first_cycle_s": round(first_cycle, 4),
                    "running": running,
                    "pending": len(snap.jobs) - running,
                    "starts": len(d.starts),
                    "grown": len(d.add_workers),
                    "shrunk": len(d.remove_workers),
                    "preempted": len(d.preemptions),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
