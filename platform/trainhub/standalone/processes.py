"""Starting and stopping TrainHub's server processes (web, worker, beat, agent)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO_DIR = Path(__file__).resolve().parents[3]

# The server processes' secrets, which an agent has no use for: left out of a local agent's
# environment, so that neither it nor anything it starts holds them (a task's own
# environment is an allow-list besides, `ps_runtime.agent.isolation.task_environment`).
# In standalone REDIS_URL holds the embedded broker's password.
AGENT_WITHHELD_ENV = ("REDIS_URL", "DATABASE_URL")


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a server process: ours, plus the source roots and `extra`."""
    env = dict(os.environ)
    roots = [str(REPO_DIR / "platform"), str(REPO_DIR)]
    if env.get("PYTHONPATH"):
        roots.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(roots)
    env.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
    env.update(extra)
    return env


def metrics_dir(directory: Path | None, *, fresh: bool) -> Path:
    """Prepare the directory prometheus-client's multiprocess mode shares between server
    processes (`trainhub.opmetrics`) and export it as PROMETHEUS_MULTIPROC_DIR for the
    processes started from here on: a new temporary one when `directory` is None.

    `fresh` empties it (a cluster starting up: nothing of earlier processes counts);
    otherwise only the web processes' live gauges go (agents and browsers connected),
    since those processes are the ones starting now.
    """
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="trainhub-prometheus-"))
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db" if fresh else "gauge_live*.db"):
        stale.unlink(missing_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return directory


def web_command(host: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "trainhub.asgi:application",
        "--host",
        host,
        "--port",
        str(port),
        "--ws",
        "websockets-sansio",  # the `websockets` implementation is deprecated (uvicorn 0.35)
        "--lifespan",
        "off",
        "--no-access-log",
    ]


def worker_command() -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "trainhub",
        "worker",
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def beat_command(schedule_file: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "trainhub",
        "beat",
        "--loglevel",
        "INFO",
        "--schedule",
        str(schedule_file),
    ]


def enroll_agent(
    server: str,
    token: str,
    state_file: Path,
    env: Mapping[str, str],
    address: str = "127.0.0.1",
    name: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `trainhub-agent enroll` for a local agent (named after the host unless `name`);
    the caller checks the return code."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ps_runtime.agent.cli",
            "enroll",
            "--server",
            server,
            f"--token={token}",  # one argument even for a token that looks like an option
            "--state-file",
            str(state_file),
            "--address",
            address,
            *(["--name", name] if name else []),
        ],
        env={k: v for k, v in env.items() if k not in AGENT_WITHHELD_ENV},
        capture_output=True,
        text=True,
        check=False,
    )


def agent_command(
    state_file: Path, work_dir: Path, *, stop_tasks_on_exit: bool = True
) -> list[str]:
    """A local agent; by default it stops its tasks when it is stopped (standalone stops
    everything it started), where a node's agent would leave them for the next one.

    The command runs the agent through `env -u`, without AGENT_WITHHELD_ENV in its
    environment whatever the environment it is started with (`ProcessGroup.env`, which
    the server processes share)."""
    withheld = [arg for name in AGENT_WITHHELD_ENV for arg in ("-u", name)]
    command = [
        shutil.which("env") or "/usr/bin/env",
        *withheld,
        sys.executable,
        "-m",
        "ps_runtime.agent.cli",
        "run",
        "--state-file",
        str(state_file),
        "--work-dir",
        str(work_dir),
    ]
    if stop_tasks_on_exit:
        command.append("--stop-tasks-on-exit")
    return command


@dataclass
class ProcessGroup:
    """Named child processes that are stopped together, in reverse start order."""

    env: dict[str, str]
    log_dir: Path | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        out = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name}.log", "ab")
        proc = subprocess.Popen(
            command,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def exited(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def stop(self, timeout: float = 15.0, names: Sequence[str] | None = None) -> None:
        """Stop the named processes (default: all), in reverse start order."""
        chosen = [p for n, p in self.procs.items() if names is None or n in names]
        for proc in reversed(chosen):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_http_ok(url: str, timeout: float, procs: ProcessGroup | None = None) -> None:
    """Wait until `url` answers 200, failing early if one of `procs` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs is not None and procs.exited():
            raise RuntimeError(f"a server process exited during start-up: {procs.exited()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")
