"""The simulator's inputs: CLUSTER.yaml (node groups and teams) and TRACE.csv (jobs)."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainhub.scheduling.policy import PRIORITY_WEIGHTS, UNLIMITED, Node, Resources, Team

TRACE_COLUMNS = (
    "job_id",
    "submit_time_s",
    "team",
    "priority",
    "duration_s",
    "workers_min",
    "workers_max",
    "ps",
    "cpu_per_worker",
    "gpu_per_worker",
    "memory_mb_per_worker",
)
# Optional columns: seconds between a job's checkpoints (default 300).
OPTIONAL_COLUMNS = ("checkpoint_every_s",)
DEFAULT_CHECKPOINT_EVERY_S = 300.0


class InputError(ValueError):
    """A cluster or trace file the simulator cannot use; the message says where."""


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]

    @property
    def capacity(self) -> Resources:
        total = Resources()
        for n in self.nodes:
            total = total + n.capacity
        return total


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: int | str  # as the trace names it (real traces' ids are strings)
    submit_time_s: float
    team: str
    priority: str
    duration_s: float  # runtime at workers_min
    workers_min: int
    workers_max: int
    ps: int
    cpu_per_worker: float
    gpu_per_worker: int
    memory_mb_per_worker: float
    checkpoint_every_s: float = DEFAULT_CHECKPOINT_EVERY_S
    # Not in trace files; the what-if replay (`scheduling/whatif.py`) sets them from specs.
    ps_cpu: float | None = None  # None: a parameter server is sized like a worker's CPUs
    ps_memory_mb: float | None = None
    coordinator_cpu: float = 0.0  # zero: no coordinator task
    coordinator_memory_mb: float = 0.0


def _job_id(raw: str) -> int | str:
    text = raw.strip()
    if not text:
        raise ValueError("job_id is empty")
    # Only ASCII digits make a number: str.isdigit() also takes "١٢", which int() reads as
    # 12 (another job's id), and "²", which int() refuses. Anything else names a job as is.
    return int(text) if text.isascii() and text.isdigit() else text


def _number(row: Mapping[str, str | None], column: str) -> str:
    """A number column's text, for int() or float(), which also read non-ASCII digits."""
    text = row[column]
    if text is None:
        raise ValueError(f"{column} is missing")
    if not text.isascii():
        raise ValueError(f"{column} {text!r} is not a number in ASCII digits")
    return text


def _resources(raw: Mapping[str, Any] | None, where: str, default: float) -> Resources:
    raw = raw or {}
    unknown = set(raw) - {"cpu", "memory_mb", "gpu"}
    if unknown:
        raise InputError(f"{where}: unknown resource(s) {sorted(unknown)}")
    try:
        return Resources(
            float(raw.get("cpu", default)),
            float(raw.get("memory_mb", default)),
            float(raw.get("gpu", default)),
        )
    except (TypeError, ValueError) as e:
        raise InputError(f"{where}: {e}") from None


def cluster_from_dict(data: Mapping[str, Any]) -> Cluster:
    groups = data.get("node_groups", data.get("nodes"))
    if not groups:
        raise InputError("cluster: 'node_groups' must list at least one group")
    nodes: list[Node] = []
    for i, g in enumerate(groups):
        where = f"node_groups[{i}]"
        cap = _resources({k: g[k] for k in ("cpu", "memory_mb", "gpu") if k in g}, where, 0.0)
        count = int(g.get("count", 1))
        nodes += [Node(len(nodes) + k + 1, cap, owner=g.get("owner")) for k in range(count)]
    teams = []
    for i, t in enumerate(data.get("teams") or []):
        where = f"teams[{i}]"
        if "name" not in t:
            raise InputError(f"{where}: 'name' is required")
        teams.append(
            Team(
                str(t["name"]),
                _resources(t.get("quota"), f"{where}.quota", 0.0),
                _resources(t.get("borrowing_limit"), f"{where}.borrowing_limit", math.inf)
                if t.get("borrowing_limit") is not None
                else UNLIMITED,
                _resources(t.get("lending_limit"), f"{where}.lending_limit", math.inf)
                if t.get("lending_limit") is not None
                else UNLIMITED,
            )
        )
    return Cluster(tuple(nodes), tuple(teams))


def load_cluster(path: str | Path) -> Cluster:
    with open(path) as f:
        return cluster_from_dict(yaml.safe_load(f) or {})


def dump_cluster(cluster_dict: Mapping[str, Any], path: str | Path) -> None:
    with open(path, "w") as f:
        yaml.safe_dump(dict(cluster_dict), f, sort_keys=False)


def load_trace(path: str | Path) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = set(TRACE_COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise InputError(f"{path}: missing column(s) {sorted(missing)}")
        seen: dict[int | str, int] = {}
        for line, row in enumerate(reader, start=2):
            try:
                every = (row.get("checkpoint_every_s") or "").strip()
                job = TraceJob(
                    _job_id(row["job_id"]),
                    float(_number(row, "submit_time_s")),
                    row["team"],
                    row["priority"],
                    float(_number(row, "duration_s")),
                    int(_number(row, "workers_min")),
                    int(_number(row, "workers_max")),
                    int(_number(row, "ps")),
                    float(_number(row, "cpu_per_worker")),
                    int(float(_number(row, "gpu_per_worker"))),
                    float(_number(row, "memory_mb_per_worker")),
                    float(_number(row, "checkpoint_every_s"))
                    if every
                    else DEFAULT_CHECKPOINT_EVERY_S,
                )
            except (TypeError, ValueError) as e:
                raise InputError(f"{path}:{line}: {e}") from None
            if job.job_id in seen:
                raise InputError(
                    f"{path}:{line}: job_id {job.job_id!r} repeats line {seen[job.job_id]}"
                )
            seen[job.job_id] = line
            if not job.checkpoint_every_s > 0:
                raise InputError(f"{path}:{line}: checkpoint_every_s must be positive")
            if job.priority not in PRIORITY_WEIGHTS:
                raise InputError(
                    f"{path}:{line}: priority {job.priority!r} is not one of "
                    f"{sorted(PRIORITY_WEIGHTS)}"
                )
            if not 1 <= job.workers_min <= job.workers_max:
                raise InputError(f"{path}:{line}: need 1 <= workers_min <= workers_max")
            jobs.append(job)
    jobs.sort(key=lambda j: j.submit_time_s)  # stable: ties keep the file's order
    return jobs


def write_trace(jobs: list[TraceJob], path: str | Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow((*TRACE_COLUMNS, *OPTIONAL_COLUMNS))
        for j in jobs:
            w.writerow(
                [
                    j.job_id,
                    f"{j.submit_time_s:g}",
                    j.team,
                    j.priority,
                    f"{j.duration_s:g}",
                    j.workers_min,
                    j.workers_max,
                    j.ps,
                    f"{j.cpu_per_worker:g}",
                    j.gpu_per_worker,
                    f"{j.memory_mb_per_worker:g}",
                    f"{j.checkpoint_every_s:g}",
                ]
            )
