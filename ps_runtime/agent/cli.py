"""`trainhub-agent enroll` and `trainhub-agent run`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ps_runtime.agent import protocol, rest
from ps_runtime.agent.facts import gather_facts
from ps_runtime.agent.isolation import Isolation, IsolationError
from ps_runtime.agent.labels import LabelError, parse_labels
from ps_runtime.agent.state import (
    INSTALL_CONFIG_NAME,
    STATE_ENV,
    WORK_DIR_ENV,
    AgentState,
    StateError,
    default_state_path,
    default_work_dir,
    load_state,
    save_state,
)
from ps_runtime.version import known_runtime_version

logger = logging.getLogger("ps_runtime.agent")


class EnrollError(Exception):
    """Enrollment failed; the message is for the user."""


def _server_message(response: rest.Response) -> str:
    """A DRF error body (`{"token": ["…"]}` or `{"detail": "…"}`) as one line."""
    try:
        body: Any = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason
    if isinstance(body, dict):
        parts = []
        for name, value in body.items():
            text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            parts.append(text if name in ("detail", "non_field_errors") else f"{name}: {text}")
        return "; ".join(parts)
    return str(body)


def enroll(
    server: str,
    token: str,
    state_file: Path,
    address: str | None = None,
    timeout: float = 30.0,
    *,
    name: str | None = None,
    labels: dict[str, str] | None = None,
) -> AgentState:
    """Register this node with the control plane and store its credential.

    `name` is the node's name (default: the hostname); `labels` go with its facts.

    Raises:
        EnrollError: the server is unreachable or refused the enrollment token.
    """
    server = server.rstrip("/")
    try:
        protocol.websocket_url(server)  # validates the scheme
    except ValueError as exc:
        raise EnrollError(str(exc)) from None
    facts = gather_facts(server, address, name=name, labels=labels)
    url = protocol.api_url(server, protocol.ENROLL_PATH)
    client = rest.Client({"User-Agent": rest.USER_AGENT}, timeout)
    issued_at = datetime.now(UTC)
    try:
        response = client.post_json(url, facts.as_enroll_body(token))
    except rest.HTTPError as exc:
        raise EnrollError(f"cannot reach the server at {server}: {exc}") from None
    if response.status != 201:
        raise EnrollError(
            f"the server refused the enrollment (HTTP {response.status}): "
            f"{_server_message(response)}"
        )
    try:
        enrolled = protocol.parse_enrolled(response.json())
    except ValueError as exc:  # not JSON, or a ProtocolError
        raise EnrollError(f"unexpected enrollment response from {url}: {exc}") from None
    state = AgentState(
        server=server,
        node_id=enrolled.node_id,
        credential=enrolled.credential,
        credential_issued_at=issued_at,
        credential_expires_at=enrolled.credential_expires_at,
    )
    try:
        save_state(state_file, state)
    except OSError as exc:
        raise EnrollError(f"cannot write the state file {state_file}: {exc}") from None
    return state


def _read_token(source: str) -> str:
    """The enrollment token from a file, or from standard input for `-`: its first line,
    without surrounding blanks.

    Raises:
        EnrollError: the file cannot be read or holds no token.
    """
    where = "standard input" if source == "-" else source
    try:
        if source == "-":
            line = sys.stdin.readline()
        else:
            with open(source, encoding="utf-8") as f:
                line = f.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise EnrollError(f"cannot read the enrollment token from {where}: {exc}") from None
    token = line.strip()
    if not token:
        raise EnrollError(f"no enrollment token in {where} (its first line is empty)")
    return token


def _cmd_enroll(args: argparse.Namespace) -> int:
    try:
        state_file = args.state_file or default_state_path()
    except StateError as exc:
        print(f"trainhub-agent: {exc}", file=sys.stderr)
        return 1
    try:
        token = args.token if args.token_file is None else _read_token(args.token_file)
    except EnrollError as exc:
        print(f"trainhub-agent: --token-file: {exc}", file=sys.stderr)
        return 2
    try:
        labels = parse_labels(args.labels or "")
    except LabelError as exc:
        print(f"trainhub-agent: --labels: {exc}", file=sys.stderr)
        return 2
    if args.name is not None and not args.name.strip():
        print("trainhub-agent: --name must not be empty", file=sys.stderr)
        return 2
    try:
        state = enroll(args.server, token, state_file, args.address, name=args.name, labels=labels)
    except EnrollError as exc:
        print(f"trainhub-agent: enrollment failed: {exc}", file=sys.stderr)
        return 1
    print(f"enrolled as node {state.node_id} with {state.server}; state saved to {state_file}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from ps_runtime.agent.daemon import Agent  # keeps `enroll` free of websockets imports

    try:
        state_file = args.state_file or default_state_path()
        state = load_state(state_file)
        work_dir = args.work_dir or default_work_dir()
    except StateError as exc:
        print(f"trainhub-agent: {exc}", file=sys.stderr)
        return 1
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"trainhub-agent: cannot create work dir {work_dir}: {exc}", file=sys.stderr)
        return 1
    logger.info(
        "node %s, server %s, state file %s, work dir %s",
        state.node_id,
        state.server,
        state_file,
        work_dir,
    )
    try:
        isolation = Isolation.from_settings(work_dir, private=(state_file,))
    except IsolationError as exc:
        print(f"trainhub-agent: {exc}", file=sys.stderr)
        return 1
    if isolation.box is not None:
        logger.info("%s", isolation.describe())
    elif isolation.refuses_tasks:
        logger.error("%s", isolation.describe())
    else:
        logger.warning("%s", isolation.describe())
    agent = Agent(
        state,
        work_dir,
        isolation=isolation,
        state_file=state_file,
        stop_tasks_on_exit=args.stop_tasks_on_exit,
    )
    code = asyncio.run(agent.run())
    if agent.fatal_message:
        print(f"trainhub-agent: {agent.fatal_message}", file=sys.stderr)
    return code


def runtime_version() -> str:
    """The trainhub-runtime version this agent runs ("unknown" for a bare copy)."""
    return known_runtime_version() or "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainhub-agent",
        description="TrainHub node agent: runs the tasks placed on this node.",
    )
    parser.add_argument(
        "--version", action="version", version=f"trainhub-agent {runtime_version()}"
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    installed = f"PREFIX/etc/{INSTALL_CONFIG_NAME}"
    state_help = (
        f"state file (default ${STATE_ENV}, else the one {installed} names when the installer "
        "put the agent here, else ~/.config/trainhub/agent.json)"
    )

    p_enroll = sub.add_parser("enroll", help="register this node with a TrainHub server")
    p_enroll.add_argument("--server", required=True, help="e.g. https://trainhub.example.com")
    token = p_enroll.add_mutually_exclusive_group(required=True)
    token.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the enrollment token from PATH, or from standard input with -",
    )
    token.add_argument(
        "--token",
        help="the enrollment token itself (visible in the process list: prefer --token-file)",
    )
    p_enroll.add_argument("--state-file", type=Path, help=state_help)
    p_enroll.add_argument("--address", help="address other nodes reach this one on")
    p_enroll.add_argument("--name", help="the node's name (default: this host's name)")
    p_enroll.add_argument("--labels", help="labels of the node: key=value,key=value")
    p_enroll.set_defaults(func=_cmd_enroll)

    p_run = sub.add_parser("run", help="run the agent daemon")
    p_run.add_argument("--state-file", type=Path, help=state_help)
    p_run.add_argument(
        "--work-dir",
        type=Path,
        help=f"task working directories (default ${WORK_DIR_ENV}, else the one {installed} "
        "names, else ~/.local/share/trainhub/agent)",
    )
    p_run.add_argument(
        "--stop-tasks-on-exit",
        action="store_true",
        help="stop every task when the agent is stopped (SIGTERM/SIGINT); by default the "
        "tasks keep running and the next agent adopts them (restarts and upgrades)",
    )
    p_run.set_defaults(func=_cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # websockets logs handshake headers at DEBUG, which would include the node
    # credential; keep it quiet whatever --log-level says.
    logging.getLogger("websockets").setLevel(logging.WARNING)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
