"""Compare the scheduling policies (cfs, priority, fifo) on three traces in the simulator.

    .venv/bin/python bench/scheduler_policies.py [--traces ../shared/traces] [--processes 2]

Traces: Philly (5,000 consecutive jobs from the 45,000th, VC sizes x 0.1, as in the
README), OpenB (every pod that ran, 5 % of the nodes, arrivals x 0.03, runtimes capped at
a day) and the synthetic bursty three-team trace (1,500 jobs, seed 1). Nothing is sampled
away: every job of each is replayed. Prints one JSON line per run (the simulator's JSON
without the per-team timelines), then a markdown table, then per trace whether cfs beats
fifo and priority on average JCT and on Jain's index (on entitlement-normalized shares) at
a utilization no lower than fifo's, with preemptions at most 10 % of the jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platform"))

from trainhub.scheduling.simulate import Simulator, TraceJob, cluster_from_dict
from trainhub.scheduling.traces import bursty, openb, philly

POLICIES = ("cfs", "priority", "fifo")
TRACES = ("philly", "openb", "bursty")
MAX_PREEMPTED_SHARE = 0.10


def load(name: str, traces: Path) -> tuple[dict[str, Any], list[TraceJob]]:
    if name == "philly":
        return philly.convert(
            traces / "philly" / "philly.csv",
            traces / "philly" / "philly_vc.csv",
            start=45000,
            count=5000,
            scale=0.1,
        )
    if name == "openb":
        return openb.convert(
            traces / "alibaba-openb" / "openb_node_list_all_node.csv",
            traces / "alibaba-openb" / "openb_pod_list_default.csv",
            node_fraction=0.05,
            time_scale=0.03,
            max_duration_s=86400.0,
        )
    return bursty.generate(1500, seed=1)


def run(task: tuple[str, str, str]) -> dict[str, Any]:
    name, policy, traces = task
    cluster, jobs = load(name, Path(traces))
    began = time.perf_counter()
    report = Simulator(cluster_from_dict(cluster), jobs, policy=policy).run().as_json()
    for team in report["teams"].values():
        team.pop("share_over_time")
    return {"trace": name, "run_s": round(time.perf_counter() - began, 1), **report}


def utilization(row: dict[str, Any]) -> float:
    """GPU utilization (all three traces are GPU-bound)."""
    return float(row["utilization"]["gpu"])


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | policy | avg JCT (s) | Jain (entitlement) | Jain (quota) | GPU util"
        " | preemptions (% of jobs) | work lost (h) | resizes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['trace']} | {r['policy']} | {r['avg_jct_s']:,.0f} | {r['jain_fairness']:.3f}"
            f" | {r['jain_fairness_quota']:.3f} | {utilization(r):.1%}"
            f" | {r['preemptions']} ({r['preemptions'] / max(1, r['jobs']):.1%})"
            f" | {r['lost_work_s'] / 3600:,.1f} | {r['resizes']} |"
        )
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]], trace: str) -> dict[str, Any]:
    by = {r["policy"]: r for r in rows if r["trace"] == trace}
    cfs, others = by["cfs"], [by["priority"], by["fifo"]]
    checks = {
        "jct": all(cfs["avg_jct_s"] < o["avg_jct_s"] for o in others),
        "jain": all(cfs["jain_fairness"] > o["jain_fairness"] for o in others),
        "utilization": utilization(cfs) >= utilization(by["fifo"]),
        "preemptions": cfs["preemptions"] <= MAX_PREEMPTED_SHARE * cfs["jobs"],
    }
    return {"trace": trace, "holds": all(checks.values()), **checks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "traces"
    parser.add_argument("--traces", type=Path, default=default, help="../shared/traces")
    parser.add_argument("--processes", type=int, default=2, help="simulations in parallel")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    tasks = [(t, p, str(args.traces)) for t in TRACES for p in POLICIES]
    # Longest first (cfs on the real traces), so the two processes finish together.
    order = sorted(tasks, key=lambda t: (t[1] != "cfs", t[0] == "bursty"))
    with Pool(args.processes) as pool:
        done = {(r["trace"], r["policy"]): r for r in pool.imap_unordered(run, order)}
    rows = [done[(t, p)] for t, p, _ in tasks]
    for r in rows:
        print(json.dumps(r))
    print()
    print(table(rows))
    print()
    for t in TRACES:
        print(json.dumps(verdict(rows, t)))
    print(json.dumps({"total_s": round(time.perf_counter() - began, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
