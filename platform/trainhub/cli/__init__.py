"""The `trainhub` command: run the servers, and talk to a server's REST API.

Server commands (standalone, web, worker, beat, manage) need the server's settings; the
client commands (login, submit, jobs, describe, logs, cancel, scale, nodes, quota,
whatif) are a
plain HTTP client and need neither Django nor a database.
"""

from __future__ import annotations

import argparse
import sys

from . import client, server


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainhub",
        description="TrainHub: run its servers, or use a server from the terminal.",
        epilog="Exit codes of client commands: 0 done, 1 refused by the server, "
        "2 bad usage, 3 not logged in, 4 server unreachable or failed.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    client.add_commands(sub)
    server.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(argv)
    if rest and args.command != "manage":
        print(f"trainhub: unrecognized arguments: {' '.join(rest)}", file=sys.stderr)
        return 2
    return int(args.handler(args, rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
