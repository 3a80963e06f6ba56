"""PostgreSQL and Redis instances of a run's own, for benchmarks that flood them and for
the fault suite that stops and starts them.

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


class Postgres:
    """A fresh PostgreSQL cluster that can be stopped and started again (fault tests)."""

    def __init__(self, max_connections: int = 300) -> None:
        for tool in ("initdb", "pg_ctl", "psql"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed (Debian: postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="trainhub-pg-"))
        self.data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.port = free_port()
        self._options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.root} -c max_connections={max_connections} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c shared_buffers=256MB"
        )
        subprocess.run(
            [*_as_postgres(), "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust"],
            check=True,
            capture_output=True,
        )
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/bench"

    def start(self) -> None:
        subprocess.run(
            [
                *_as_postgres(),
                "pg_ctl",
                "-D",
                str(self.data),
                "-o",
                self._options,
                "-l",
                str(self.root / "log"),
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
        )

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(
            [*_as_postgres(), "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop"],
            capture_output=True,
            check=False,
        )

    def create_database(self, name: str = "bench") -> str:
        subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-c",
                f"CREATE DATABASE {name}",
            ],
            check=True,
            capture_output=True,
        )
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class Redis:
    """A redis-server that keeps nothing on disk, on a port that survives restarts."""

    def __init__(self, password: str | None = None) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (Debian: redis-server)")
        self.port = free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        if self.password:
            command += ["--requirepass", self.password]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.port, 10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@contextlib.contextmanager
def postgres(max_connections: int = 300) -> Iterator[str]:
    """A fresh PostgreSQL cluster; yields the URL of its `bench` database."""
    server = Postgres(max_connections)
    try:
        server.start()
        yield server.create_database()
    finally:
        server.remove()


@contextlib.contextmanager
def redis() -> Iterator[str]:
    """A redis-server that keeps nothing on disk; yields its URL."""
    server = Redis()
    try:
        server.start()
        yield server.url
    finally:
        server.stop()


@contextlib.contextmanager
def instances() -> Iterator[Instances]:
    with postgres() as database_url, redis() as redis_url:
        yield Instances(database_url, redis_url)
