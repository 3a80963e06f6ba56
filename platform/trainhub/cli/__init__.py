"""The `trainhub` command: run the servers, and (later) talk to the REST API."""

from __future__ import annotations

import argparse
import sys

from . import server


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainhub", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
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
