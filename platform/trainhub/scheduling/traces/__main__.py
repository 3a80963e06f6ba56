"""`python -m trainhub.scheduling.traces {philly,openb,bursty} ... --cluster OUT.yaml
--trace OUT.csv`."""

from __future__ import annotations

import argparse
import sys

from trainhub.scheduling.simulate.inputs import dump_cluster, write_trace

from . import bursty, openb, philly


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainhub.scheduling.traces",
        description="Write the simulator's cluster and trace files from a public trace "
        "or a synthetic one.",
    )
    sub = parser.add_subparsers(dest="source", required=True)
    p = sub.add_parser("philly", help="Microsoft Philly (philly.csv + philly_vc.csv)")
    p.add_argument("--jobs", required=True, help="philly.csv")
    p.add_argument("--vcs", required=True, help="philly_vc.csv")
    p.add_argument("--start", type=int, default=45000, help="first job (in submission order)")
    p.add_argument("--count", type=int, default=5000, help="consecutive jobs to keep")
    p.add_argument("--scale", type=float, default=0.1, help="cluster size vs the VC sizes")
    o = sub.add_parser("openb", help="Alibaba OpenB (node list + pod list)")
    o.add_argument("--nodes", required=True, help="openb_node_list_all_node.csv")
    o.add_argument("--pods", required=True, help="openb_pod_list_default.csv")
    o.add_argument("--node-fraction", type=float, default=0.05)
    o.add_argument("--time-scale", type=float, default=0.03, help="multiplies submit times")
    o.add_argument("--max-duration", type=float, default=86400.0, help="cap on job runtime (s)")
    b = sub.add_parser("bursty", help="a synthetic bursty three-team trace (bursty.py)")
    b.add_argument("--jobs", type=int, default=1500, help="how many jobs")
    b.add_argument("--seed", type=int, default=1)
    for s in (p, o, b):
        s.add_argument("--cluster", required=True, help="CLUSTER.yaml to write")
        s.add_argument("--trace", required=True, help="TRACE.csv to write")
    args = parser.parse_args(argv)
    if args.source == "philly":
        cluster, jobs = philly.convert(
            args.jobs, args.vcs, start=args.start, count=args.count, scale=args.scale
        )
    elif args.source == "bursty":
        cluster, jobs = bursty.generate(args.jobs, args.seed)
    else:
        cluster, jobs = openb.convert(
            args.nodes,
            args.pods,
            node_fraction=args.node_fraction,
            time_scale=args.time_scale,
            max_duration_s=args.max_duration,
        )
    dump_cluster(cluster, args.cluster)
    write_trace(jobs, args.trace)
    print(f"wrote {args.cluster} and {args.trace} ({len(jobs)} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
