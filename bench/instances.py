"""PostgreSQL and Redis instances of a run's own, for benchmarks that flood them.

Never the shared services: `initdb` + `pg_ctl` into a temporary directory (run as the
`postgres` user when we are root, since PostgreSQL refuses to run as root) and
`redis-server` without persistence, each on a free loopback port. Both are stopped and
removed when the context ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Instances:
    database_url: str
    redis_url: str


def _as_postgres() -> list[str]:
    """A command prefix that runs as the `postgres` user when we are root."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


@contextlib.contextmanager
def postgres(max_connections: int = 300) -> Iterator[str]:
    """A fresh PostgreSQL cluster; yields the URL of its `bench` database."""
    for tool in ("initdb", "pg_ctl"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed (Debian: postgresql)")
    root = Path(tempfile.mkdtemp(prefix="trainhub-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    run = _as_postgres()
    subprocess.run(
        [*run, "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
        f"-c max_connections={max_connections} -c fsync=off -c synchronous_commit=off "
        "-c full_page_writes=off -c shared_buffers=256MB"
    )
    subprocess.run(
        [*run, "pg_ctl", "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "postgres",
                "-c",
                "CREATE DATABASE bench",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgres://postgres@127.0.0.1:{port}/bench"
    finally:
        subprocess.run(
            [*run, "pg_ctl", "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def redis() -> Iterator[str]:
    """A redis-server that keeps nothing on disk; yields its URL."""
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not installed (Debian: redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, 10)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def instances() -> Iterator[Instances]:
    with postgres() as database_url, redis() as redis_url:
        yield Instances(database_url, redis_url)
