"""Microsoft Philly (Pollux artifact `philly.csv`, Helios `philly_vc.csv`) to simulator input.

Derivations (the trace has no priorities, elasticity or parameter servers):
- teams are the virtual clusters; a team's quota is its VC's nodes (`philly_vc.csv`) times
  `scale`, rounded up, each node 8 GPUs, 48 CPUs and 384 GiB; VCs without a size are folded
  into one team `other` with one node;
- priority from the runtime the user could expect: under 1 h `normal` (interactive and
  debugging runs someone waits on), 1 h to 1 day `offline`, longer `experiment` (long
  exploratory runs that tolerate preemption); Philly has no production tier;
- one worker per GPU (1 GPU, 4 CPUs, 32 GiB), no PS; multi-GPU jobs of at least 1 h are
  elastic from their GPU count up to twice it (at most 64); `duration_s` is the recorded
  runtime, at the recorded GPU count; jobs larger than the cluster are cut to its size;
- submit times are relative to the first job of the window (`start`, `count` consecutive
  jobs in submission order).
"""

from __future__ import annotations

import csv
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from trainhub.scheduling.simulate.inputs import TraceJob

NODE = {"cpu": 48, "memory_mb": 393216, "gpu": 8}
WORKER_CPU, WORKER_MEMORY_MB = 4, 32768


def priority_for(duration_s: float) -> str:
    if duration_s < 3600:
        return "normal"
    if duration_s < 86400:
        return "offline"
    return "experiment"


def convert(
    jobs_csv: str | Path, vc_csv: str | Path, *, start: int, count: int, scale: float
) -> tuple[dict[str, Any], list[TraceJob]]:
    with open(vc_csv, newline="") as f:
        sizes = {r["vc"]: int(r["node num"]) for r in csv.DictReader(f)}
    with open(jobs_csv, newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: (r["timestamp"], r["cluster"]))
    window = rows[start : start + count]
    nodes_of = {vc: max(1, math.ceil(n * scale)) for vc, n in sorted(sizes.items())}
    if any(r["cluster"] not in sizes for r in window):
        nodes_of["other"] = 1
    total_gpus = sum(nodes_of.values()) * NODE["gpu"]
    t0 = datetime.fromisoformat(window[0]["timestamp"])
    jobs = []
    for i, r in enumerate(window):
        duration = max(1.0, float(r["duration"]))
        gpus = min(max(1, int(r["num_gpus"])), total_gpus)
        elastic = gpus >= 2 and duration >= 3600
        jobs.append(
            TraceJob(
                job_id=i + 1,
                submit_time_s=(datetime.fromisoformat(r["timestamp"]) - t0).total_seconds(),
                team=r["cluster"] if r["cluster"] in sizes else "other",
                priority=priority_for(duration),
                duration_s=duration,
                workers_min=gpus,
                workers_max=min(2 * gpus, 64, total_gpus) if elastic else gpus,
                ps=0,
                cpu_per_worker=WORKER_CPU,
                gpu_per_worker=1,
                memory_mb_per_worker=WORKER_MEMORY_MB,
            )
        )
    cluster = {
        "node_groups": [{"count": sum(nodes_of.values()), **NODE}],
        "teams": [
            {"name": vc, "quota": {k: v * n for k, v in NODE.items()}} for vc, n in nodes_of.items()
        ],
    }
    return cluster, jobs
