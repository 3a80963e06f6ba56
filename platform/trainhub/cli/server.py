"""`trainhub standalone|web|worker|beat|manage`: running TrainHub's server processes."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainhub.standalone.processes import ProcessGroup

Handler = Any


def add_commands(sub: Any) -> None:
    p = sub.add_parser("standalone", help="run everything in one command (SQLite, embedded broker)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(handler=standalone)

    p = sub.add_parser("web", help="serve the web app and WebSockets (ASGI, uvicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("TRAINHUB_WEB_WORKERS", "1")),
        help="web processes sharing the port (default $TRAINHUB_WEB_WORKERS or 1); agents "
        "and browsers spread over them",
    )
    p.set_defaults(handler=web)

    p = sub.add_parser("worker", help="run a Celery worker (scheduling cycles)")
    p.set_defaults(handler=lambda a, _: _exec(_processes().worker_command()))

    p = sub.add_parser("beat", help="run Celery beat (the 5 s scheduling tick)")
    p.set_defaults(
        handler=lambda a, _: _exec(
            _processes().beat_command(
                Path(os.environ.get("TRAINHUB_DATA_DIR", "var")) / "celerybeat-schedule"
            )
        )
    )

    p = sub.add_parser("manage", help="run a Django management command (migrate, createsuperuser…)")
    p.set_defaults(handler=manage)


def _processes() -> Any:
    from trainhub.standalone import processes

    return processes


def _exec(command: list[str]) -> int:
    env = _processes().child_env({})
    os.execve(command[0], command, env)
    return 0  # not reached


def manage(args: argparse.Namespace, rest: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["trainhub manage", *rest])
    return 0


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _workers(args: argparse.Namespace) -> list[str]:
    if args.workers < 1:
        raise SystemExit("trainhub web: --workers must be at least 1")
    return ["--workers", str(args.workers)] if args.workers > 1 else []


def web(args: argparse.Namespace, _: list[str]) -> int:
    """uvicorn, after preparing the metrics directory its workers share (several workers,
    or PROMETHEUS_MULTIPROC_DIR set for the worker and beat too)."""
    command = [*_processes().web_command(args.host, args.port), *_workers(args)]
    shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if shared or args.workers > 1:
        _processes().metrics_dir(Path(shared) if shared else None, fresh=not shared)
    return _exec(command)


def standalone(args: argparse.Namespace, _: list[str]) -> int:
    """Bring up web, worker, beat and a local agent on SQLite and an embedded broker."""
    if not _port_free(args.host, args.port):
        print(
            f"trainhub: port {args.port} on {args.host} is in use; pick another with --port",
            file=sys.stderr,
        )
        return 2
    data_dir = Path(os.environ.get("TRAINHUB_DATA_DIR", "var")).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    # The database, the agent's credential, checkpoints: ours alone. A root agent's task
    # uids must traverse it to the directories their sandboxes bind (never to list it or
    # read the rest: the sandbox holds nothing else of it, and the database is 0600).
    data_dir.chmod(0o711 if os.geteuid() == 0 else 0o700)

    from trainhub.standalone.broker import start_broker

    broker, redis_url = start_broker()
    os.environ.pop("DATABASE_URL", None)  # standalone is SQLite by definition
    # Web, worker and beat count into one directory that /metrics sums (trainhub.opmetrics).
    _processes().metrics_dir(data_dir / "prometheus", fresh=True)
    os.environ.update(
        TRAINHUB_DATA_DIR=str(data_dir),
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="trainhub.settings",
    )
    import django

    django.setup()
    from trainhub.standalone.bootstrap import bootstrap, local_enrollment_token
    from trainhub.standalone.processes import (
        ProcessGroup,
        agent_command,
        beat_command,
        child_env,
        enroll_agent,
        wait_http_ok,
        web_command,
        worker_command,
    )

    print(f"TrainHub standalone: data in {data_dir}", flush=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    booted = bootstrap(admin_password=os.environ.get("TRAINHUB_ADMIN_PASSWORD"))
    for database in data_dir.glob("trainhub.sqlite3*"):
        database.chmod(0o600)
    url = f"http://{args.host}:{args.port}"
    group = ProcessGroup(env=child_env({}), log_dir=data_dir / "logs")
    signals = 0  # the first asks for a stop that keeps the jobs' work, a second: at once

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal signals
        signals += 1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    commands = {
        "web": web_command(args.host, args.port),
        "worker": worker_command(),
        "beat": beat_command(data_dir / "celerybeat-schedule"),
    }
    try:
        for name, command in commands.items():
            group.start(name, command)
        wait_http_ok(f"{url}/healthz", timeout=60, procs=group)
        state_file = data_dir / "agent.json"
        if not _local_credential_usable(state_file):
            enroll = enroll_agent(url, local_enrollment_token(), state_file, group.env)
            if enroll.returncode != 0:
                print(
                    f"trainhub: the local agent could not enroll:\n{enroll.stderr}", file=sys.stderr
                )
                return 1
        commands["agent"] = agent_command(state_file, data_dir / "agent")
        group.start("agent", commands["agent"])
        _banner(url, data_dir, booted.admin_password)
        while not signals:
            for name, code in group.exited().items():
                print(
                    f"trainhub: {name} exited with code {code}; restarting it "
                    f"(log: {data_dir / 'logs' / (name + '.log')})",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(1)
                group.start(name, commands[name])
            time.sleep(0.5)
    finally:
        print("TrainHub standalone: stopping…", flush=True)
        _requeue_jobs(group, lambda: signals > 1)
        group.stop()
        broker.shutdown()
        broker.server_close()
    return 0


def _requeue_jobs(group: ProcessGroup, interrupted: Callable[[], bool]) -> None:
    """Running jobs save a checkpoint, stop and go back to the queue before the processes
    stop (the scheduler first, so that nothing places them again); they resume at the next
    start. Skipped when the web process or the agent is not running (nothing could report
    the jobs' stops)."""
    from trainhub.standalone.shutdown import requeue_all

    if "agent" not in group.procs or {"web", "agent"} & set(group.exited()):
        return
    group.stop(names=("worker", "beat"))
    try:
        requeue_all(interrupted=interrupted, progress=lambda m: print(m, flush=True))
    except Exception as exc:  # the stop goes on whatever happens here
        print(f"trainhub: could not requeue the running jobs: {exc}", file=sys.stderr, flush=True)


def _local_credential_usable(state_file: Path) -> bool:
    """False when the local agent has no state yet or its credential expired (a standalone
    stopped for longer than a credential lives enrolls its agent anew); an unreadable
    state is left to the agent, which says what is wrong with it."""
    from datetime import UTC, datetime

    from ps_runtime.agent.state import StateError, load_state

    if not state_file.exists():
        return False
    try:
        state = load_state(state_file)
    except StateError:
        return True
    expires = state.credential_expires_at
    return expires is None or expires > datetime.now(UTC)


def _banner(url: str, data_dir: Path, password: str | None) -> None:
    """What the standalone says once it is up: the address and how to sign in come last,
    where a terminal leaves them in view."""
    lines = [
        "",
        f"  API docs:  {url}/api/docs/      admin: {url}/admin/",
        f"  logs:      {data_dir / 'logs'}",
        f"  forgot the admin password? {_changepassword_command(data_dir)}",
        "  Ctrl-C stops everything.",
        "",
        f"TrainHub is up at {url}/",
    ]
    if password:
        lines.append(f"  sign in as admin with password {password}  (shown only this once)")
    else:
        lines.append(
            "  sign in as admin (password from TRAINHUB_ADMIN_PASSWORD, or the one shown on "
            "first start)"
        )
    print("\n".join(lines), flush=True)


def _changepassword_command(data_dir: Path) -> str:
    """The command that resets the admin's password of this standalone, as typed from the
    current directory."""
    cli = Path(sys.executable).parent / "trainhub"
    if cli.is_relative_to(Path.cwd()):
        cli = cli.relative_to(Path.cwd())
    command = f"{cli} manage changepassword admin"
    if data_dir != Path("var").resolve():
        command = f"TRAINHUB_DATA_DIR={data_dir} {command}"
    return command
