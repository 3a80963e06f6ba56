"""`trainhub standalone`: one command, SQLite, embedded broker, a local agent — and a job;
stopped mid-job and started again, the job resumes from its checkpoint."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from ..archive_builders import tar_gz
from .cluster import free_port, job_processes, task_port_range

pytestmark = pytest.mark.slow

PASSWORD = "pw-standalone"


def _spec(name: str, epochs: int) -> dict[str, Any]:
    return {
        "name": name,
        "team": "default",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": {"epochs": epochs},
        "parameter_servers": {"replicas": 1, "resources": {"cpu": 0.5, "memory_mb": 512}},
        "workers": {"min": 1, "resources": {"cpu": 0.5, "memory_mb": 512}},
        "coordinator": {"resources": {"cpu": 0.5, "memory_mb": 512}},
    }


class Standalone:
    """One `trainhub standalone` process on a data directory and port of its own."""

    def __init__(self, data_dir: Path, port: int, ports: dict[str, str]) -> None:
        self.data_dir, self.url = data_dir, f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
        env.update(TRAINHUB_DATA_DIR=str(data_dir), TRAINHUB_ADMIN_PASSWORD=PASSWORD, **ports)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainhub.cli", "standalone", "--port", str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.output = ""
        self.banner = self.read_until("TrainHub is up at", timeout=90)
        token = httpx.post(
            f"{self.url}/api/v1/auth/token/", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        self.api = httpx.Client(
            base_url=f"{self.url}/api/v1", headers={"Authorization": f"Token {token}"}
        )

    def read_until(self, marker: str, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output += line
            if marker in line:
                return self.output
        raise AssertionError(f"standalone never said {marker!r}:\n{self.output}")

    def wait_state(self, job_id: int, states: set[str], timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job: dict[str, Any] = self.api.get(f"/jobs/{job_id}/").json()
            if job["state"] in states:
                return job
            time.sleep(0.5)
        logs = self.api.get(f"/jobs/{job_id}/logs/").text[-3000:]
        raise AssertionError(f"job {job_id} never reached {states}: {job['state']}\n{logs}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 120) -> int:
        """Ctrl-C (to the standalone process itself, as a terminal would: its children run
        in their own sessions); the rest of its output lands in `self.output`."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        out, _ = self.proc.communicate(timeout=timeout)
        self.output += out
        return self.proc.returncode

    def submit(self, spec: dict[str, Any]) -> int:
        response = self.api.post("/jobs/", json=spec)
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextmanager
def standalone(data_dir: Path, port: int, ports: dict[str, str]) -> Iterator[Standalone]:
    server = Standalone(data_dir, port, ports)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            try:
                server.stop(signal.SIGTERM, timeout=90)
            except subprocess.TimeoutExpired:
                server.kill()


def left_behind(data_dir: Path, job_ids: list[int]) -> list[int]:
    """Live processes of these jobs' tasks, or of the installation (by its data dir)."""
    needle = f"TRAINHUB_DATA_DIR={data_dir}".encode()
    pids = [pid for job_id in job_ids for pid in job_processes(job_id)]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            zombie = "State:\tZ" in (entry / "status").read_text()
        except OSError:
            continue
        if needle in environ and not zombie:
            pids.append(int(entry.name))
    return pids


def installation_processes(data_dir: Path) -> dict[int, tuple[bytes, dict[str, str]]]:
    """The installation's live processes (by its data dir): command line and environment."""
    needle = f"TRAINHUB_DATA_DIR={data_dir}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in environ:
            pairs = (item.decode(errors="replace").partition("=") for item in environ if item)
            found[int(entry.name)] = (cmdline, {k: v for k, _, v in pairs})
    return found


def test_standalone_broker_needs_a_password_that_no_task_sees(sandboxed_home: Path) -> None:
    """The embedded broker has a new random password every start: the web, worker and beat
    processes get it in REDIS_URL; the agent and its tasks do not; no log holds it; a
    client without it is refused."""
    data_dir = sandboxed_home / "var"
    with standalone(data_dir, free_port(), task_port_range()) as server:
        processes = installation_processes(data_dir)
        urls = {
            name: {env.get("REDIS_URL") for cmd, env in processes.values() if name in cmd}
            for name in (b"uvicorn", b"worker", b"beat")
        }
        (url,) = urls[b"uvicorn"]
        assert url and urls[b"worker"] == urls[b"beat"] == {url}, urls
        broker = urlsplit(url)
        password = broker.password
        assert password and len(password) >= 43, "the broker URL holds no password"
        agents = [env for cmd, env in processes.values() if b"ps_runtime.agent.cli" in cmd]
        assert agents and all("REDIS_URL" not in env for env in agents)

        with socket.create_connection((broker.hostname, broker.port), timeout=5) as conn:
            conn.sendall(b"*1\r\n$4\r\nPING\r\n")
            assert conn.recv(100) == b"-NOAUTH Authentication required.\r\n"

        job_id = server.submit(_spec("standalone-secret", 6))
        seen = 0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            for pid in job_processes(job_id):
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:
                    continue
                seen += 1
                assert password.encode() not in environ and b"REDIS_URL=" not in environ
            if server.api.get(f"/jobs/{job_id}/").json()["state"] in {"succeeded", "failed"}:
                break
            time.sleep(0.2)
        assert seen, (
            server.api.get(f"/jobs/{job_id}/").json()["state"],
            server.api.get(f"/jobs/{job_id}/events/").json(),
            (data_dir / "logs" / "agent.log").read_text()[-3000:],
        )
        assert server.wait_state(job_id, {"succeeded", "failed"})["state"] == "succeeded"
        assert server.stop(signal.SIGTERM) == 0
    assert password not in server.output
    for log in (data_dir / "logs").iterdir():
        assert password not in log.read_text(errors="replace"), log


def test_standalone_runs_a_job_and_stops_cleanly(sandboxed_home: Path) -> None:
    port = free_port()
    data_dir = sandboxed_home / "var"
    with standalone(data_dir, port, task_port_range()) as server:
        assert f"{server.url}/" in server.banner
        assert httpx.get(f"{server.url}/readyz").json() == {"status": "ok"}  # anonymous
        ready = httpx.get(f"{server.url}/readyz", headers=server.api.headers).json()
        assert ready["checks"] == {"database": "ok", "broker": "ok"}
        job = server.api.post("/jobs/", json=_spec("standalone-mf", 2)).json()
        done = server.wait_state(job["id"], {"succeeded", "failed", "cancelled"})
        assert done["state"] == "succeeded", server.api.get(f"/jobs/{job['id']}/logs/").text
        series = server.api.get(f"/jobs/{job['id']}/metrics/").json()["series"]
        assert len(series["test_rmse"]) == 2
        assert (data_dir / "trainhub.sqlite3").exists()
        # Database, credential, checkpoints: the task uids of a root agent may traverse the
        # directory to what their sandboxes bind, no more; the database is the server's.
        assert data_dir.stat().st_mode & 0o777 == (0o711 if os.geteuid() == 0 else 0o700)
        assert (data_dir / "trainhub.sqlite3").stat().st_mode & 0o777 == 0o600
        assert server.stop(signal.SIGTERM) == 0
    assert left_behind(data_dir, [job["id"]]) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/healthz")


def test_standalone_stopped_mid_job_resumes_it_from_its_checkpoint(sandboxed_home: Path) -> None:
    """Ctrl-C while a job trains: it saves a checkpoint, goes back to the queue and
    everything stops; the next start resumes it from that checkpoint to success."""
    port, ports = free_port(), task_port_range()
    data_dir = sandboxed_home / "var"
    with standalone(data_dir, port, ports) as first:
        job = first.api.post("/jobs/", json=_spec("standalone-resume", 30)).json()
        job_id = job["id"]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            series = first.api.get(f"/jobs/{job_id}/metrics/").json()["series"]
            if len(series.get("epoch", [])) >= 2:
                break
            time.sleep(0.3)
        else:
            raise AssertionError(first.api.get(f"/jobs/{job_id}/logs/").text[-3000:])
        assert first.stop() == 0, first.output
    assert "1 job(s) saving a checkpoint before stopping" in first.output, first.output
    assert f"requeued job(s) {job_id}; they resume at the next start" in first.output
    assert left_behind(data_dir, [job_id]) == []

    with standalone(data_dir, port, ports) as second:
        done = second.wait_state(job_id, {"succeeded", "failed", "cancelled"})
        lines = [x["line"] for x in second.api.get(f"/jobs/{job_id}/logs/").json()["lines"]]
        assert done["state"] == "succeeded", lines[-40:]
        events = second.api.get(f"/jobs/{job_id}/events/").json()
        states = [e["to_state"] for e in events if e["kind"] == "state"]
        assert states[-6:] == [
            "running",
            "preempted",
            "pending",
            "starting",
            "running",
            "succeeded",
        ], states
        by_kind = {e["kind"]: e["reason"] for e in events}
        assert by_kind["checkpoint"] == "the coordinator saved a checkpoint and stopped"
        preempted = next(e for e in events if e["to_state"] == "preempted")
        assert preempted["reason"].startswith("TrainHub standalone is stopping")

        saved = [m for x in lines if (m := re.search(r"stopped on request at step (\d+)", x))]
        resumed = [
            m for x in lines if (m := re.search(r"^resumed from checkpoint .* at step (\d+)", x))
        ]
        assert len(saved) == 1 and len(resumed) == 1, lines[-40:]
        assert int(resumed[0][1]) == int(saved[0][1]) > 0
        result = next(json.loads(x)["result"] for x in lines if x.startswith('{"result"'))
        assert result["completed_steps"] == result["steps"]
        assert len(result["test_rmse_history"]) < 30  # the resumed run did not start over
        assert second.stop() == 0
    assert "saving a checkpoint" not in second.output  # nothing ran at the second stop
    assert left_behind(data_dir, [job_id]) == []


ATTACK = b"""
import json, os, socket
from pathlib import Path

def _can(action):
    try:
        action()
        return True
    except OSError:
        return False

def _listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None

def _broker_answer(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"*2\\r\\n$4\\r\\nKEYS\\r\\n$1\\r\\n*\\r\\n")
            return conn.recv(200).decode(errors="replace")
    except OSError as exc:
        return f"error: {exc}"

def train(data_dir, broker_port):
    data = Path(data_dir)
    found = {
        "read_database": _can(lambda: (data / "trainhub.sqlite3").read_bytes()),
        "read_credential": _can(lambda: (data / "agent.json").read_bytes()),
        "data_dir": _listing(data),
        "broker": _broker_answer(broker_port),
    }
    print("ATTACK " + json.dumps(found), flush=True)
    return found
"""


def test_a_standalone_jobs_code_cannot_reach_the_database_credential_or_broker(
    sandboxed_home: Path,
) -> None:
    data_dir = sandboxed_home / "var"
    with standalone(data_dir, free_port(), task_port_range()) as server:
        url = next(
            env["REDIS_URL"]
            for cmd, env in installation_processes(data_dir).values()
            if b"uvicorn" in cmd
        )
        port = urlsplit(url).port
        upload = server.api.post(
            "/code/", files={"file": ("a.tar.gz", io.BytesIO(tar_gz({"attack.py": ATTACK})))}
        )
        assert upload.status_code == 201, upload.text
        spec = {
            **_spec("standalone-attack", 1),
            "entrypoint": "attack:train",
            "args": {"data_dir": str(data_dir), "broker_port": port},
            "code": upload.json()["digest"],
        }
        job_id = server.submit(spec)
        done = server.wait_state(job_id, {"succeeded", "failed"})
        lines = server.api.get(f"/jobs/{job_id}/logs/").json()["lines"]
        report = next(
            (json.loads(x["line"][7:]) for x in lines if x["line"].startswith("ATTACK ")), None
        )
        assert report is not None, (done, lines[-20:])
        assert report["read_database"] is False, report
        assert report["read_credential"] is False
        # Only the mount points of its own directories: no database, logs or credential.
        assert set(report["data_dir"] or []) <= {"agent", "checkpoints"}, report
        assert report["broker"].startswith("-NOAUTH"), report
        assert server.stop(signal.SIGTERM) == 0
