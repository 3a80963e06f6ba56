"""`trainhub login|submit|jobs|describe|logs|cancel|scale|nodes|quota|whatif` and the
experiment commands (`cli/experiments.py`): the REST API
from a terminal. Tables for people, `--json` for scripts.

Exit codes: 0 done; 1 the server refused the request (the message says why); 2 bad usage;
3 not logged in or the login is no longer valid; 4 the server could not be reached or failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trainhub.jobs.jobspec import JobSpec

from . import config
from .api_client import ApiError, signed_in
from .errors import EXIT_LOGIN, EXIT_REFUSED, EXIT_SERVER, CommandError
from .experiments import add_commands as _add_experiments
from .login import add_command as _add_login
from .output import amount, print_json, print_table
from .submission import submit
from .whatif import add_command as _add_whatif

TERMINAL = {"succeeded", "failed", "cancelled"}


def add_commands(sub: Any) -> None:
    def command(name: str, handler: Any, help: str, json_flag: bool = True) -> Any:
        p = sub.add_parser(name, help=help, description=help)
        if json_flag:
            p.add_argument("--json", action="store_true", help="print JSON for scripts")
        p.set_defaults(handler=_run(handler))
        return p

    _add_login(command)

    p = command("submit", submit, "submit a job from a YAML (or JSON) spec")
    p.add_argument("spec", type=Path, help="job spec file, e.g. job.yaml")
    p.add_argument("--team", help="override the spec's team")
    p.add_argument(
        "--code",
        type=Path,
        metavar="DIR",
        help="pack DIR (minus .trainhubignore), upload it and run the job with it first on "
        "the Python path",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="create nothing: say whether the job would start now, its queue position, and "
        "why it would wait (--code still uploads, by content digest)",
    )

    p = command("jobs", jobs, "list jobs of your teams")
    p.add_argument("--team")
    p.add_argument("--state", action="append", help="repeatable: --state pending --state running")
    p.add_argument("--priority")
    p.add_argument("--name", help="part of the name")
    p.add_argument("--limit", type=int, default=50)

    p = command("describe", describe, "show a job, its tasks and events, and why it is pending")
    p.add_argument("job", type=int)

    p = command("logs", logs, "print a job's logs", json_flag=False)
    p.add_argument("job", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)

    p = command("cancel", cancel, "cancel a job")
    p.add_argument("job", type=int)

    p = command("scale", scale, "set how many workers a job runs (within its min and max)")
    p.add_argument("job", type=int)
    p.add_argument("workers", type=int)

    command("nodes", nodes, "list the cluster's nodes")

    p = command("quota", quota, "show quotas and usage (default: every team of yours)")
    p.add_argument("team", nargs="?")

    _add_whatif(command)
    _add_experiments(command)


def _run(handler: Any) -> Any:
    def run(args: argparse.Namespace, _rest: list[str]) -> int:
        try:
            handler(args)
        except config.NotLoggedIn as exc:
            print(f"trainhub: {exc}", file=sys.stderr)
            return EXIT_LOGIN
        except CommandError as exc:
            print(f"trainhub: {exc}", file=sys.stderr)
            return exc.code
        except ApiError as exc:
            print(f"trainhub: {exc}", file=sys.stderr)
            if exc.status is None or exc.status >= 500:
                return EXIT_SERVER
            if exc.status == 401:
                print("trainhub: run `trainhub login URL` again.", file=sys.stderr)
                return EXIT_LOGIN
            return EXIT_REFUSED
        except KeyboardInterrupt:
            return 130
        return 0

    return run


def jobs(args: argparse.Namespace) -> None:
    page = signed_in().get(
        "/jobs/",
        team=args.team,
        state=args.state,
        priority=args.priority,
        name=args.name,
        limit=args.limit,
    )
    if args.json:
        print_json(page)
        return
    print_table(
        ["ID", "NAME", "TEAM", "PRIORITY", "STATE", "WORKERS", "CREATED", "REASON"],
        [
            [
                j["id"],
                j["name"],
                j["team"],
                j["priority"],
                j["state"],
                _workers(j),
                j["created_at"][:19].replace("T", " "),
                j["pending_reason"] or j["message"][:60] or "",
            ]
            for j in page["results"]
        ],
    )
    if page["count"] > len(page["results"]):
        print(f"({len(page['results'])} of {page['count']}; use --limit or filters)")


def _workers(job: dict[str, Any]) -> str:
    bounds = JobSpec.from_dict(job["spec"]).workers
    running = sum(1 for t in job["tasks"] if t["role"] == "worker" and t["state"] == "running")
    target = job["target_workers"] or bounds.min
    return f"{running}/{target} ({bounds.min}-{bounds.max})"


def describe(args: argparse.Namespace) -> None:
    client = signed_in()
    job = client.get(f"/jobs/{args.job}/")
    events = client.get(f"/jobs/{args.job}/events/")
    if args.json:
        print_json({**job, "events": events})
        return
    spec = JobSpec.from_dict(job["spec"])
    print(f"Job {job['id']}: {job['name']}")
    print(f"  team:       {job['team']}   priority: {job['priority']}")
    print(f"  state:      {job['state']}")
    if job.get("stalled_at") and job["state"] == "running":
        print(f"  stalled:    since {job['stalled_at']} (no progress; see the stall event)")
    if job["state"] == "pending":
        print(f"  pending:    {job['pending_reason'] or 'waiting for the scheduler'}")
    if job["message"]:
        print(f"  message:    {job['message']}")
    if job.get("end_cause") and job["end_cause"] != "succeeded":
        print(f"  cause:      {job['end_cause']}")
        if job.get("end_hint"):
            print(f"  hint:       {job['end_hint']}")
    if job.get("restarts") or job.get("infra_restarts"):
        print(
            f"  restarts:   {job['restarts']} of {spec.max_restarts} after the job's own errors, "
            f"{job.get('infra_restarts', 0)} of {spec.retry.max} after {', '.join(spec.retry.on)}"
        )
    print(f"  submitted:  {job['created_at']} by {job['submitted_by']}")
    print(f"  entrypoint: {spec.entrypoint}")
    print(
        f"  workers:    {_workers(job)} running/target (min-max), "
        f"{amount(asdict(spec.workers.resources))} each"
    )
    print(
        f"  PS shards:  {spec.parameter_servers.replicas}, "
        f"{amount(asdict(spec.parameter_servers.resources))} each"
        + (
            f", {spec.parameter_servers.replication} backup(s) of each shard"
            if spec.parameter_servers.replication
            else ""
        )
    )
    if spec.environment is not None:
        env = spec.environment
        python = f", Python {env.python}" if env.python else ""
        print(f"  packages:   {' '.join(env.requirements) or 'none'}{python}")
    if job["tasks"]:
        print("\nTasks:")
        print_table(
            ["ROLE", "INDEX", "STATE", "NODE", "ADDRESS", "GPUS", "ATTEMPT", "EXIT", "CAUSE"],
            [
                [
                    t["role"],
                    t["index"],
                    t["state"],
                    t["node"],
                    t["address"],
                    ",".join(map(str, t["gpu_indices"])) or "",
                    t["attempt"],
                    t["exit_code"],
                    t.get("end_cause") or "",
                ]
                for t in job["tasks"]
            ],
        )
        for t in job["tasks"]:
            if t["state"] == "preparing" and t["message"]:
                print(f"  {t['role']}-{t['index']}: {t['message']}")
            elif t.get("end_cause") not in (None, "", "succeeded", "stopped"):
                hint = f" — {t['end_hint']}" if t.get("end_hint") else ""
                print(f"  {t['role']}-{t['index']} ended: {t['end_cause']}{hint}")
    print("\nEvents:")
    print_table(
        ["TIME", "EVENT", "REASON", "BY"],
        [
            [
                e["time"][:19].replace("T", " "),
                f"{e['from_state'] or ''}->{e['to_state']}" if e["kind"] == "state" else e["kind"],
                e["reason"],
                e["actor"],
            ]
            for e in events
        ],
    )


def logs(args: argparse.Namespace) -> None:
    client = signed_in()
    after = 0
    while True:
        lines = client.get(f"/jobs/{args.job}/logs/", after=after)["lines"]
        for line in lines:
            print(f"[{line['source']}] {line['line']}", flush=True)
            after = max(after, line["id"])
        if lines:
            continue  # there may be more pages
        if not args.follow:
            return
        if client.get(f"/jobs/{args.job}/")["state"] in TERMINAL:
            # One last read: lines may have landed between the two requests.
            for line in client.get(f"/jobs/{args.job}/logs/", after=after)["lines"]:
                print(f"[{line['source']}] {line['line']}", flush=True)
            return
        time.sleep(args.interval)


def cancel(args: argparse.Namespace) -> None:
    job = signed_in().post(f"/jobs/{args.job}/cancel/")
    if args.json:
        print_json(job)
    else:
        print(f"job {job['id']}: {job['state']}")


def scale(args: argparse.Namespace) -> None:
    job = signed_in().post(f"/jobs/{args.job}/scale/", {"workers": args.workers})
    if args.json:
        print_json(job)
    else:
        print(f"job {job['id']}: {job['target_workers']} workers requested ({job['state']})")


def nodes(args: argparse.Namespace) -> None:
    page = signed_in().get("/nodes/", limit=1000)
    if args.json:
        print_json(page)
        return
    print_table(
        ["ID", "HOSTNAME", "STATUS", "ALIVE", "CPUS", "MEMORY", "GPUS", "TASKS", "LAST SEEN"],
        [
            [
                n["id"],
                n["hostname"],
                # The web's words: ready, cordoned (or quarantined), draining, drained, lost.
                "drained"
                if n["drained"]
                else ("quarantined" if n["quarantine_reason"] else n["status"]),
                "yes" if n["alive"] else "no",
                f"{n['cpus']:g}",
                f"{n['memory_mb']}Mi",
                len(n["gpus"]),
                n["active_tasks"],
                (n["last_seen"] or "never")[:19].replace("T", " "),
            ]
            for n in page["results"]
        ],
    )


def quota(args: argparse.Namespace) -> None:
    client = signed_in()
    if args.team:
        slugs = [args.team]
    else:
        slugs = [t["slug"] for t in client.get("/teams/", limit=1000)["results"]]
    if not slugs:
        raise CommandError("You are in no team yet; ask a platform admin to add you to one.")
    quotas = [client.get(f"/teams/{slug}/quota/") for slug in slugs]
    if args.json:
        print_json(quotas if not args.team else quotas[0])
        return
    for i, q in enumerate(quotas):
        if i:
            print()
        usage = q["usage"]
        print(f"Team {q['team']}")
        print_table(
            ["", "CPU", "MEMORY (MiB)", "GPU"],
            [
                ["nominal quota", f"{q['cpu']:g}", q["memory_mb"], q["gpu"]],
                _limit_row("borrowing limit", q["borrowing_limit"]),
                _limit_row("lending limit", q["lending_limit"]),
                _amount_row("used", usage["used"]),
                _amount_row("  within quota", usage["within_quota"]),
                _amount_row("  borrowed", usage["borrowed"]),
                _amount_row("lent to others", usage["lent"]),
            ],
        )
        caps = {c["priority"]: c for c in q["priority_caps"]}
        print_table(
            ["PRIORITY", "CAP", "REQUESTED", "HELD"],
            [
                [
                    p["priority"],
                    amount(caps[p["priority"]]) if p["priority"] in caps else "no cap",
                    amount(p["requested"]),
                    amount(p["held"]),
                ]
                for p in usage["by_priority"]
            ],
        )


def _limit_row(label: str, limit: dict[str, Any]) -> list[Any]:
    return [label] + [
        "unlimited" if limit[k] is None else f"{limit[k]:g}" for k in ("cpu", "memory_mb", "gpu")
    ]


def _amount_row(label: str, value: dict[str, Any]) -> list[Any]:
    return [label, f"{value['cpu']:g}", value["memory_mb"], value["gpu"]]
