"""`trainhub whatif`: replay the last days with changed quotas or policy settings
(`POST /api/v1/whatif/`) and print, per team, what happened beside what would have."""

from __future__ import annotations

import argparse
from typing import Any

from .api_client import signed_in
from .errors import EXIT_USAGE, CommandError
from .output import print_json, print_table

RESOURCES = ("cpu", "memory_mb", "gpu")


def add_command(command: Any) -> None:
    p = command(
        "whatif",
        whatif,
        "replay the recorded history with changed quotas or policy settings (admins)",
    )
    p.add_argument("--days", type=float, default=7, help="replay the last N days (default 7)")
    p.add_argument("--policy", help="cfs, priority or fifo (default: the server's)")
    p.add_argument("--grace", type=float, help="preemption grace period, seconds")
    p.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="TEAM:RES=N[,RES=N]",
        help="a team's nominal quota, e.g. --quota vision:cpu=32,gpu=8 (repeatable)",
    )
    p.add_argument(
        "--borrowing-limit",
        action="append",
        default=[],
        metavar="TEAM:RES=N|none",
        help="a team's borrowing limit, e.g. vision:gpu=2 or vision:gpu=none (unlimited)",
    )


def _parse(values: list[str], flag: str, *, nullable: bool) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for value in values:
        team, sep, rest = value.partition(":")
        if not sep or not team or not rest:
            raise CommandError(f"{flag} {value!r}: write TEAM:RES=N[,RES=N]", EXIT_USAGE)
        amounts = out.setdefault(team, {})
        for part in rest.split(","):
            name, eq, number = part.partition("=")
            if not eq or name not in RESOURCES:
                raise CommandError(
                    f"{flag} {value!r}: {part!r} is not RES=N with RES one of "
                    f"{', '.join(RESOURCES)}",
                    EXIT_USAGE,
                )
            if nullable and number in ("none", "unlimited"):
                amounts[name] = None
                continue
            try:
                amounts[name] = float(number) if name == "cpu" else int(number)
            except ValueError:
                raise CommandError(
                    f"{flag} {value!r}: {number!r} is not a number", EXIT_USAGE
                ) from None
    return out


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    nominal = _parse(args.quota, "--quota", nullable=False)
    borrowing = _parse(args.borrowing_limit, "--borrowing-limit", nullable=True)
    quotas = []
    for team in sorted(set(nominal) | set(borrowing)):
        entry: dict[str, Any] = {"team": team, **nominal.get(team, {})}
        if team in borrowing:
            entry["borrowing_limit"] = borrowing[team]
        quotas.append(entry)
    body: dict[str, Any] = {"days": args.days, "quotas": quotas}
    if args.policy:
        body["policy"] = args.policy
    if args.grace is not None:
        body["preemption_grace_seconds"] = args.grace
    return body


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.1f}"


def _signed(seconds: float) -> str:
    return f"{seconds / 60:+,.1f}"


def whatif(args: argparse.Namespace) -> None:
    result = signed_in().post("/whatif/", request_body(args))
    if args.json:
        print_json(result)
        return
    print(
        f"{result['jobs']} jobs submitted {result['since']} .. {result['until']} "
        f"replayed with policy {result['policy']} ({result['seconds']:.1f} s)"
    )
    rows = []
    for row in result["teams"]:
        a, r, w, c = row["actual"], row["replay"], row["whatif"], row["change"]
        rows.append(
            [
                row["team"],
                a["jobs"],
                _minutes(a["wait_s"]),
                _minutes(r["wait_s"]),
                _minutes(w["wait_s"]),
                _signed(c["wait_s"]),
                _signed(c["jct_s"]),
                f"{c['cpu_hours']:+,.1f}",
                f"{c['gpu_hours']:+,.1f}",
                w["never_started"] or "",
            ]
        )
    print_table(
        [
            "TEAM",
            "JOBS",
            "WAIT MIN (ACTUAL)",
            "(REPLAY)",
            "(WHAT-IF)",
            "Δ WAIT",
            "Δ JCT MIN",
            "Δ CPU-H",
            "Δ GPU-H",
            "NEVER STARTS",
        ],
        rows,
    )
