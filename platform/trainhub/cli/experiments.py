"""`trainhub search|experiments|experiment`: hyperparameter searches from a terminal."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .api_client import signed_in
from .output import print_json, print_table
from .submission import read_document


def add_commands(command: Any) -> None:
    p = command(
        "search",
        search,
        "start an experiment: a job spec plus a search block (method, metric, params, ...)",
    )
    p.add_argument("spec", type=Path, help="experiment file, e.g. experiment.yaml")
    p.add_argument("--team", help="override the spec's team")
    p.add_argument(
        "--code",
        type=Path,
        metavar="DIR",
        help="pack DIR, upload it and run every trial with it first on the Python path",
    )

    p = command("experiments", experiments, "list the experiments of your teams")
    p.add_argument("--limit", type=int, default=50)

    p = command(
        "experiment", experiment, "show an experiment and its trials, or pause, resume, cancel it"
    )
    p.add_argument("experiment", type=int)
    p.add_argument("action", nargs="?", choices=["pause", "resume", "cancel"])


def search(args: argparse.Namespace) -> None:
    client, document = read_document(args)
    created = client.post("/experiments/", document)
    if args.json:
        print_json(created)
        return
    print(
        f"started experiment {created['id']} ({created['name']}, team {created['team']}): "
        f"{len(created['trials'])} trials so far"
    )
    print(f"  watch it at {client.url}/experiments/{created['id']}/")


def experiments(args: argparse.Namespace) -> None:
    client = signed_in()
    page = client.get("/experiments/", limit=args.limit)
    rows = page["results"]
    if args.json:
        print_json(rows)
        return
    print_table(
        ["ID", "NAME", "TEAM", "STATE", "TRIALS", "BEST", "METRIC"],
        [
            [
                e["id"],
                e["name"],
                e["team"],
                e["state"],
                len(e["trials"]),
                e["best_trial"],
                _value(e["best_metric"]),
            ]
            for e in rows
        ],
    )


def experiment(args: argparse.Namespace) -> None:
    client = signed_in()
    path = f"/experiments/{args.experiment}/"
    body = client.post(f"{path}{args.action}/", None) if args.action else client.get(path)
    if args.json:
        print_json(body)
        return
    search = body["search"]
    print(f"experiment {body['id']}: {body['name']} (team {body['team']}) — {body['state']}")
    print(f"  {search['method']} on {search['metric']} ({search['goal']})")
    if body["pending_reason"]:
        print(f"  waiting: {body['pending_reason']}")
    if body["message"]:
        print(f"  {body['message']}")
    names = list(search["params"])
    print_table(
        ["TRIAL", *[n.upper() for n in names], "STATE", "RUNG", "BEST", "JOB"],
        [
            [
                t["number"],
                *[_value(t["params"].get(n)) for n in names],
                t["state"],
                t["rung"],
                _value(t["best_metric"]),
                t["job"],
            ]
            for t in body["trials"]
        ],
    )


def _value(value: Any) -> Any:
    return f"{value:.4g}" if isinstance(value, float) else value
