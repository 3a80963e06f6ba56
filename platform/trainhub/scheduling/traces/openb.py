"""Alibaba OpenB (cluster-trace-gpu-v2023) to simulator input.

Derivations (the trace has no teams, priorities, elasticity or parameter servers):
- nodes: an evenly spaced sample of `node_fraction` of the node list (CPU-only and GPU
  the node list (CPU-only and GPU nodes keep their proportions), capacities as recorded;
- jobs: the pods that ran (phase `Pending` pods never did, so they are dropped), one worker
  each, not elastic, no PS; fractional GPUs (`gpu_milli` < 1000) are rounded up to a whole
  GPU; submit = `creation_time` x `time_scale` (compressing arrivals to load the smaller
  cluster), duration = `deletion_time` - `scheduled_time`, at most `max_duration_s` (most
  pods are still running when the trace ends, so their durations are censored anyway; the
  1 % that run for weeks would otherwise set the makespan alone);
- teams are workload classes: `cpu` (no GPU), `gpu-shared` (a fraction of a GPU), `gpu-1`
  (one GPU) and `gpu-multi` (several); each team's quota of each resource is the cluster's
  capacity times the team's share of the trace's demand for it (resource x seconds);
- priority from QoS: `Guaranteed` production, `LS` (latency-sensitive) normal, `Burstable`
  offline, `BE` (best effort) experiment.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from trainhub.scheduling.simulate.inputs import TraceJob

PRIORITY = {"Guaranteed": "production", "LS": "normal", "Burstable": "offline", "BE": "experiment"}


def team_for(num_gpu: int, gpu_milli: int) -> str:
    if num_gpu == 0:
        return "cpu"
    if num_gpu == 1 and gpu_milli < 1000:
        return "gpu-shared"
    return "gpu-1" if num_gpu == 1 else "gpu-multi"


def convert(
    nodes_csv: str | Path,
    pods_csv: str | Path,
    *,
    node_fraction: float,
    time_scale: float,
    max_duration_s: float = 86400.0,
) -> tuple[dict[str, Any], list[TraceJob]]:
    with open(nodes_csv, newline="") as f:
        all_nodes = list(csv.DictReader(f))
    keep = max(1, round(len(all_nodes) * node_fraction))
    step = len(all_nodes) / keep
    sample = [all_nodes[int(i * step)] for i in range(keep)]
    groups: dict[tuple[float, int, int], int] = {}
    for n in sample:
        key = (int(n["cpu_milli"]) / 1000, int(n["memory_mib"]), int(n["gpu"]))
        groups[key] = groups.get(key, 0) + 1
    node_groups = [
        {"count": c, "cpu": cpu, "memory_mb": mem, "gpu": gpu}
        for (cpu, mem, gpu), c in sorted(groups.items())
    ]
    capacity = [sum(g["count"] * g[k] for g in node_groups) for k in ("cpu", "memory_mb", "gpu")]
    max_gpu = int(max(g["gpu"] for g in node_groups))
    with open(pods_csv, newline="") as f:
        pods = [p for p in csv.DictReader(f) if p["pod_phase"] != "Pending" and p["scheduled_time"]]
    pods.sort(key=lambda p: (int(p["creation_time"]), p["name"]))
    jobs = []
    demand: dict[str, list[float]] = {}
    for i, p in enumerate(pods):
        gpus = int(min(int(p["num_gpu"]), max_gpu))
        if int(p["num_gpu"]) == 1 and int(p["gpu_milli"]) == 0:
            gpus = 1
        cpu = int(p["cpu_milli"]) / 1000
        mem = int(p["memory_mib"])
        duration = float(int(p["deletion_time"]) - int(p["scheduled_time"]))
        duration = min(max(1.0, duration), max_duration_s)
        team = team_for(int(p["num_gpu"]), int(p["gpu_milli"]))
        acc = demand.setdefault(team, [0.0, 0.0, 0.0])
        for r, x in enumerate((cpu, mem, gpus)):
            acc[r] += x * duration
        jobs.append(
            TraceJob(
                job_id=i + 1,
                submit_time_s=int(p["creation_time"]) * time_scale,
                team=team,
                priority=PRIORITY.get(p["qos"], "normal"),
                duration_s=duration,
                workers_min=1,
                workers_max=1,
                ps=0,
                cpu_per_worker=cpu,
                gpu_per_worker=gpus,
                memory_mb_per_worker=mem,
            )
        )
    totals = [sum(d[r] for d in demand.values()) for r in range(3)]
    teams = []
    for name in sorted(demand):
        quota = [
            math.floor(capacity[r] * demand[name][r] / totals[r]) if totals[r] else 0
            for r in range(3)
        ]
        teams.append(
            {"name": name, "quota": {"cpu": quota[0], "memory_mb": quota[1], "gpu": quota[2]}}
        )
    return {"node_groups": node_groups, "teams": teams}, jobs
