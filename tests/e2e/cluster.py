"""A real TrainHub in services mode on loopback: PostgreSQL, Redis and separate web, Celery
worker, beat and agent processes, as production runs them."""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import httpx
import psycopg
import redis
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

ADMIN = ("admin", "admin-pw-e2e")
SHARED_UDATA = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "ml-100k" / "u.data"
# Generated data sets, where every sandboxed task may read them (TRAINHUB_TASK_DATA_PATHS).
E2E_DATA = Path("/tmp/trainhub-e2e-data")


def sandbox_base(prefix: str = "trainhub-e2e-") -> Path:
    """A directory for agent work dirs and checkpoint roots that the task uids can traverse
    (bubblewrap binds their directories as the task's uid): pytest's own tmp directories
    sit below /tmp/pytest-of-root, which is 0700. The caller removes it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    return path


def data_paths() -> str:
    """TRAINHUB_TASK_DATA_PATHS for the e2e agents: the generated and the shared data."""
    E2E_DATA.mkdir(mode=0o755, exist_ok=True)
    paths = [str(E2E_DATA)]
    if SHARED_UDATA.exists():
        paths.append(str(SHARED_UDATA.parent))
    return os.pathsep.join(paths)


def task_port_range() -> dict[str, str]:
    """A task port range of its own for one test installation, so that installations
    running at the same time on this machine never hand out the same port."""
    low = random.randrange(20000, 32000, 100)
    return {"TRAINHUB_TASK_PORT_MIN": str(low), "TRAINHUB_TASK_PORT_MAX": str(low + 99)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def fresh_database(base_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database next to `base_url`'s, dropped afterwards."""
    name = f"trainhub_e2e_{secrets.token_hex(4)}"
    parsed = urlparse(base_url)
    admin_dsn = urlunparse(parsed._replace(path="/postgres"))
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunparse(parsed._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class LiveCluster:
    """Handles to a running services-mode TrainHub."""

    def __init__(self, url: str, group: ProcessGroup, data_dir: Path) -> None:
        self.url = url
        self.group = group
        self.data_dir = data_dir
        # Where the agent's work dir and the checkpoint root live (task uids traverse it).
        self.base = data_dir
        response = httpx.post(
            f"{url}/api/v1/auth/token/", json={"username": ADMIN[0], "password": ADMIN[1]}
        )
        response.raise_for_status()
        self.token = response.json()["token"]
        self.api = httpx.Client(
            base_url=f"{url}/api/v1", headers={"Authorization": f"Token {self.token}"}, timeout=30
        )

    def submit(self, **spec: Any) -> dict[str, Any]:
        # Restarts start at once unless a test asks otherwise: the default backoff (10 s,
        # doubling) would add up to a minute to every test whose job fails or restarts.
        spec.setdefault("retry", {"backoff_seconds": 0})
        response = self.api.post("/jobs/", json=spec)
        assert response.status_code == 201, response.text
        return dict(response.json())

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.api.get(f"/jobs/{job_id}/").raise_for_status().json())

    def wait_state(self, job_id: int, states: set[str], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while job["state"] not in states:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} still {job['state']} after {timeout} s: "
                    f"{json.dumps(job)[:2000]}\nlogs:\n{self.logs(job_id)}"
                )
            time.sleep(0.5)
            job = self.job(job_id)
        return job

    def logs(self, job_id: int) -> str:
        lines = self.api.get(f"/jobs/{job_id}/logs/").json()["lines"]
        return "\n".join(f"[{x['source']}] {x['line']}" for x in lines[-80:])


@contextmanager
def services_cluster(
    database_url: str, redis_url: str, tmp: Path, *, agent_env: dict[str, str] | None = None
) -> Iterator[LiveCluster]:
    redis.Redis.from_url(redis_url).flushdb()
    port = free_port()
    base = sandbox_base()
    url = f"http://127.0.0.1:{port}"
    env = child_env(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "TRAINHUB_DATA_DIR": str(tmp / "data"),
            "TRAINHUB_CHECKPOINT_ROOT": str(base / "checkpoints"),
            "TRAINHUB_TASK_DATA_PATHS": data_paths(),
            "TRAINHUB_CHANNEL_PREFIX": f"e2e{port}",
            **task_port_range(),
            "DJANGO_SUPERUSER_PASSWORD": ADMIN[1],
        }
    )

    setup_database(env, team_cpu=2)
    group = ProcessGroup(env=env, log_dir=tmp / "logs")
    try:
        group.start("web", web_command("127.0.0.1", port))
        group.start("worker", worker_command())
        group.start("beat", beat_command(tmp / "celerybeat-schedule"))
        wait_http_ok(f"{url}/readyz", timeout=60, procs=group)
        cluster = LiveCluster(url, group, tmp)
        cluster.base = base
        token = cluster.api.post("/enrollment-tokens/", json={"max_uses": 1}).json()["token"]
        state = tmp / "agent.json"
        enroll = enroll_agent(url, token, state, env)
        assert enroll.returncode == 0, enroll.stderr
        group.start("agent", with_env(agent_command(state, base / "agent"), agent_env))
        _wait_node_alive(cluster)
        yield cluster
    except BaseException:
        _dump_logs(tmp / "logs")
        raise
    finally:
        group.stop()
        shutil.rmtree(base, ignore_errors=True)


def setup_database(env: dict[str, str], team_cpu: float) -> None:
    """Migrate, create the admin (DJANGO_SUPERUSER_PASSWORD in `env`) and the team `recsys`
    with `team_cpu` cores of quota, in one process: each Django start costs seconds on a
    busy machine."""
    admin = ("--admin", ADMIN[0])
    setup = [
        ("migrate", "--noinput"),
        ("createsuperuser", "--noinput", "--username", ADMIN[0], "--email", "a@example.com"),
        ("create_team", "recsys", "--cpu", f"{team_cpu:g}", "--memory-mb", "16384", *admin),
    ]
    script = (
        f"from django.core.management import call_command\nfor c in {setup!r}: call_command(*c)"
    )
    done = subprocess.run(
        [sys.executable, "-m", "trainhub.cli", "manage", "shell", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"setting up the database failed:\n{done.stdout}\n{done.stderr}"


def with_env(command: list[str], extra: dict[str, str] | None) -> list[str]:
    """An `agent_command` (run through `env`) with `extra` variables set for it alone."""
    if not extra:
        return command
    at = command.index(sys.executable)
    return [*command[:at], *(f"{k}={v}" for k, v in extra.items()), *command[at:]]


# An agent whose tasks run without the sandbox (a second agent on this machine).
UNSANDBOXED = {"TRAINHUB_TASK_ISOLATION": "none"}


def second_agent(cluster: LiveCluster, tmp: Path) -> dict[str, Any]:
    """Enroll and start a second agent, `node-2` on 127.0.0.2 (its own task ports'
    address), running tasks unsandboxed; its node as the API lists it once it is up.
    Stop it with `cluster.group.stop(names=["agent2"])` (cordon it first: no later job may
    be placed where no agent runs)."""
    token = cluster.api.post("/enrollment-tokens/", json={"max_uses": 1}).json()["token"]
    state = tmp / "agent2.json"
    enrolled = enroll_agent(
        cluster.url, token, state, cluster.group.env, address="127.0.0.2", name="node-2"
    )
    assert enrolled.returncode == 0, enrolled.stderr
    cluster.group.start("agent2", with_env(agent_command(state, tmp / "agent2"), UNSANDBOXED))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for node in cluster.api.get("/nodes/").json()["results"]:
            if node["hostname"] == "node-2" and node["last_seen"]:
                return dict(node)
        time.sleep(0.3)
    raise AssertionError("the second agent's node never came up")


def _wait_node_alive(cluster: LiveCluster, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = cluster.api.get("/nodes/").json()["results"]
        if nodes and nodes[0]["last_seen"]:
            return
        time.sleep(0.3)
    raise AssertionError("the agent's node never came up")


def _dump_logs(log_dir: Path) -> None:
    for log in sorted(log_dir.glob("*.log")):
        print(
            f"===== {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-60:]),
            file=sys.stderr,
        )


def job_processes(job_id: int, checkpoint_root: Path | None = None) -> list[int]:
    """PIDs of live processes started for this job (found by their environment); with
    `checkpoint_root`, only the installation's whose checkpoints live there (job ids
    repeat across installations that run on one machine at the same time)."""
    needles = {f"TRAINHUB_JOB_ID={job_id}".encode()}
    if checkpoint_root is not None:
        needles.add(f"TRAINHUB_CHECKPOINT_DIR={checkpoint_root / f'job-{job_id}'}".encode())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if needles <= set(environ.split(b"\0")) and "State:\tZ" not in status:
            pids.append(int(entry.name))
    return pids


def describe_processes(pids: list[int]) -> str:
    """Which task each process belongs to, for a failure message."""
    lines = []
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        task = [
            v.decode() for v in environ if v.startswith((b"TRAINHUB_ROLE=", b"TRAINHUB_TASK_ID="))
        ]
        lines.append(f"{pid} {' '.join(task)}: {command[:120].decode(errors='replace')}")
    return "\n".join(lines)


def task_pid(
    job_id: int, role: str, index: int = 0, checkpoint_root: Path | None = None
) -> int | None:
    """PID of the live process running this task of the job, if any (`checkpoint_root`:
    as for `job_processes`)."""
    want = {
        f"TRAINHUB_JOB_ID={job_id}".encode(),
        f"TRAINHUB_ROLE={role}".encode(),
        f"TRAINHUB_TASK_INDEX={index}".encode(),
    }
    for pid in job_processes(job_id, checkpoint_root):
        try:
            environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if want <= environ:
            return pid
    return None


def movielens_file(tmp: Path) -> Path:
    """ml-100k's u.data when ../shared has it; else a generated file in the same format,
    where the sandboxed tasks may read it (`E2E_DATA`)."""
    if SHARED_UDATA.exists():
        return SHARED_UDATA
    import numpy as np

    rng = np.random.default_rng(7)
    users, items, dim = 400, 600, 4
    p = rng.normal(0, 0.6, (users, dim))
    q = rng.normal(0, 0.6, (items, dim))
    bu, bi = rng.normal(0, 0.4, users), rng.normal(0, 0.4, items)
    u = rng.integers(0, users, 30000)
    i = rng.integers(0, items, 30000)
    r = np.clip(
        np.rint(3.5 + bu[u] + bi[i] + (p[u] * q[i]).sum(1) + rng.normal(0, 0.4, u.size)), 1, 5
    )
    E2E_DATA.mkdir(mode=0o755, exist_ok=True)
    path = E2E_DATA / "u.data"
    path.write_text(
        "".join(
            f"{a + 1}\t{b + 1}\t{int(c)}\t{881250949 + k}\n"
            for k, (a, b, c) in enumerate(zip(u, i, r, strict=True))
        )
    )
    return path


__all__ = [
    "LiveCluster",
    "fresh_database",
    "job_processes",
    "movielens_file",
    "sandbox_base",
    "services_cluster",
    "task_pid",
    "task_port_range",
    "with_env",
]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
