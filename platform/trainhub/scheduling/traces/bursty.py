"""A synthetic bursty three-team trace, for what the public traces lack: teams that submit
in bursts at different times, so quota is lent and taken back all day.

The cluster: 16 GPU nodes (8 GPUs, 64 CPUs, 512 GiB) and 4 CPU nodes (64 CPUs, 256 GiB).
Teams, with unequal quotas of every resource: `vision` 50 %, `speech` 30 %, `research`
20 % and a borrowing limit of 16 GPUs (and its CPUs and memory in proportion). Jobs:
`vision` submits 40 % of them, `speech` 35 %, `research` 25 %, each team in bursts (a
burst every few hours at a random time, about 25 jobs a minute or two apart), so a team
is often far above its quota while another is idle. Job ids are strings
(`vision-00001`). A job is a GPU job (85 %: 1, 2, 4 or 8 one-GPU workers, half of the
multi-GPU ones elastic up to twice their size) or a CPU job with parameter servers; its
runtime is log-normal (median 40 min, at most 12 h); priorities: 5 % production, 45 %
normal, 30 % offline, 20 % experiment. The arrival span is set so the jobs ask, on
average, for about 90 % of the cluster's GPUs. Same seed, same trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

from trainhub.scheduling.simulate.inputs import TraceJob

GPU_NODE = {"cpu": 64, "memory_mb": 524288, "gpu": 8}
CPU_NODE = {"cpu": 64, "memory_mb": 262144, "gpu": 0}
GPU_NODES, CPU_NODES = 16, 4
# name: (quota share, share of the jobs, borrowing limit in GPUs or None)
TEAMS = {"vision": (0.5, 0.40, None), "speech": (0.3, 0.35, None), "research": (0.2, 0.25, 16)}
BURST_JOBS = 25
BURST_GAP_S = 90.0
TARGET_LOAD = 0.9
PRIORITIES = (("production", 0.05), ("normal", 0.45), ("offline", 0.30), ("experiment", 0.20))


def cluster() -> dict[str, Any]:
    totals = {k: GPU_NODES * GPU_NODE[k] + CPU_NODES * CPU_NODE[k] for k in GPU_NODE}
    teams = []
    for name, (share, _, limit_gpu) in TEAMS.items():
        team: dict[str, Any] = {
            "name": name,
            "quota": {k: math.floor(v * share) for k, v in totals.items()},
        }
        if limit_gpu is not None:
            scale = limit_gpu / totals["gpu"]
            team["borrowing_limit"] = {k: math.floor(v * scale) for k, v in totals.items()}
        teams.append(team)
    return {
        "node_groups": [{"count": GPU_NODES, **GPU_NODE}, {"count": CPU_NODES, **CPU_NODE}],
        "teams": teams,
    }


def _priority(rng: random.Random) -> str:
    x = rng.random()
    for name, p in PRIORITIES:
        if x < p:
            return name
        x -= p
    return PRIORITIES[-1][0]


def _job(rng: random.Random, job_id: str, team: str, submit: float) -> TraceJob:
    duration = min(43200.0, max(60.0, rng.lognormvariate(math.log(2400), 1.0)))
    if rng.random() < 0.85:
        size = rng.choice((1, 1, 1, 2, 2, 4, 8))
        elastic = size >= 2 and rng.random() < 0.5
        return TraceJob(
            job_id, submit, team, _priority(rng), round(duration), size,
            2 * size if elastic else size, 0, 6, 1, 49152,
        )  # fmt: skip
    workers = rng.choice((2, 4, 8))
    return TraceJob(
        job_id, submit, team, _priority(rng), round(duration), workers,
        workers * 2, rng.choice((1, 2)), 4, 0, 16384,
    )  # fmt: skip


def generate(jobs: int, seed: int) -> tuple[dict[str, Any], list[TraceJob]]:
    """The cluster (as CLUSTER.yaml holds it) and `jobs` jobs, in submission order."""
    rng = random.Random(seed)
    counts = {team: round(jobs * share) for team, (_, share, _) in TEAMS.items()}
    counts["research"] = jobs - counts["vision"] - counts["speech"]
    # Expected GPU-seconds per job, to size the arrival span for the target load.
    per_job = 0.85 * (sum((1, 1, 1, 2, 2, 4, 8)) / 7) * 2400 * math.exp(0.5)
    span = jobs * per_job / (TARGET_LOAD * GPU_NODES * GPU_NODE["gpu"])
    out: list[TraceJob] = []
    for team, left in counts.items():
        while left > 0:
            size = min(left, max(1, round(rng.expovariate(1 / BURST_JOBS))))
            start = rng.uniform(0, span)
            t = start
            for _ in range(size):
                t += rng.expovariate(1 / BURST_GAP_S)
                out.append(_job(rng, "", team, round(t, 1)))
            left -= size
    out.sort(key=lambda j: (j.submit_time_s, str(j.job_id)))
    t0 = out[0].submit_time_s if out else 0.0
    numbers = dict.fromkeys(TEAMS, 0)
    renamed = []
    for j in out:  # ids and times as submitted: `vision-00001` is vision's first job
        numbers[j.team] += 1
        renamed.append(
            replace(
                j,
                job_id=f"{j.team}-{numbers[j.team]:05d}",
                submit_time_s=round(j.submit_time_s - t0, 1),
            )
        )
    return cluster(), renamed
