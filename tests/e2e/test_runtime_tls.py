"""A real job whose runtime gRPC is TLS (`TRAINHUB_RUNTIME_TLS=on`, as a job across hosts
gets by default): its tasks get the platform's certificates from the agent, train to
success, and a call without TLS to one of its servers is refused while it runs."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ps_runtime.wire import rpc

from .cluster import free_port, task_pid, task_port_range
from .test_standalone import _spec, standalone

pytestmark = pytest.mark.slow


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().partition("=")[::2] for p in pairs if b"=" in p)


def _health(
    address: str, token: str, tls: rpc.TLSFiles | None, *, wait: bool = False
) -> grpc.StatusCode:
    """The health answer of the server at `address`. `wait`: until it listens (its process
    shows up before it binds), at most 30 s; a handshake that keeps failing still fails."""
    channel = grpc.insecure_channel(address) if tls is None else rpc.create_channel(address, tls)
    with channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(),
                metadata=rpc.auth_metadata(token),
                timeout=30 if wait else 10,
                wait_for_ready=wait,
            )
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def test_a_job_runs_over_tls_and_refuses_plaintext(sandboxed_home: Path) -> None:
    ports = {**task_port_range(), "TRAINHUB_RUNTIME_TLS": "on"}
    with standalone(sandboxed_home / "var", free_port(), ports) as server:
        job = server.api.post("/jobs/", json=_spec("tls-mf", 6)).json()
        server.wait_state(job["id"], {"running"})
        deadline = time.monotonic() + 60
        while (pid := task_pid(job["id"], "ps")) is None:
            assert time.monotonic() < deadline, "the PS task never showed up"
            time.sleep(0.2)
        env = _environ(pid)
        files = rpc.TLSFiles(
            env["TRAINHUB_TLS_CERT"], env["TRAINHUB_TLS_KEY"], env["TRAINHUB_TLS_CA"]
        )
        # In the task's agent-owned run/ directory: readable by the job's gid (the group of
        # its checkpoint directory), writable by nobody else.
        job_gid = Path(env["TRAINHUB_CHECKPOINT_DIR"]).stat().st_gid
        for path in (files.cert, files.key, files.ca):
            info = Path(path).stat()
            assert Path(path).parent.name == "run", path
            if os.geteuid() == 0:
                assert job_gid != 0
                assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (
                    0o640,
                    0,
                    job_gid,
                ), path
            else:
                assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o600, os.geteuid()), path
        assert "PRIVATE KEY" in Path(files.key).read_text()
        address, token = env["TRAINHUB_BIND"], env["TRAINHUB_JOB_TOKEN"]
        trusted = rpc.TLSFiles(ca=files.ca)

        assert _health(address, token, trusted, wait=True) == grpc.StatusCode.OK
        assert _health(address, token, None) == grpc.StatusCode.UNAVAILABLE
        assert _health(address, "wrong", trusted) == grpc.StatusCode.UNAUTHENTICATED

        done = server.wait_state(job["id"], {"succeeded", "failed", "cancelled"}, timeout=300)
        assert done["state"] == "succeeded", server.api.get(f"/jobs/{job['id']}/logs/").text
        # Nothing of the material reaches a user's answer.
        answers = [server.api.get(f"/jobs/{job['id']}/{p}").text for p in ("", "logs/")]
        assert not any("BEGIN" in a for a in answers)
