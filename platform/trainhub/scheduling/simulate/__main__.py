"""`python -m trainhub.scheduling.simulate --cluster C.yaml --trace T.csv [--policy P] [--json]`."""

from __future__ import annotations

import argparse
import json
import sys

from trainhub.scheduling.policy import POLICIES

from .engine import Simulator
from .inputs import InputError, load_cluster, load_trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainhub.scheduling.simulate",
        description="Replay a job trace through a scheduling policy on a virtual clock.",
    )
    parser.add_argument("--cluster", required=True, help="CLUSTER.yaml: node groups and teams")
    parser.add_argument("--trace", required=True, help="TRACE.csv: one job per line")
    parser.add_argument("--policy", default="cfs", choices=sorted(POLICIES))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--freeze-seconds", type=float, default=120.0, help="no rescale within this window"
    )
    parser.add_argument(
        "--interval", type=float, default=0.0, help="also run a cycle every N s while jobs wait"
    )
    parser.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    args = parser.parse_args(argv)
    try:
        cluster = load_cluster(args.cluster)
        trace = load_trace(args.trace)
    except (OSError, InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.limit:
        trace = trace[: args.limit]
    report = Simulator(
        cluster,
        trace,
        policy=args.policy,
        freeze_seconds=args.freeze_seconds,
        interval_s=args.interval,
    ).run()
    print(json.dumps(report.as_json()) if args.json else report.as_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
