"""Real processes: `python -m ps_runtime.launch` and `python -m ps_runtime.task`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.launch.local import free_ports, parse_entry_args

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHUB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _metrics(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            record = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if "values" in record:
            out.append(record)
    return out


def test_parse_entry_args() -> None:
    assert parse_entry_args(
        ["--data", "u.data", "--epochs", "5", "--lr=0.1", "--fast", "--batch-size", "64"]
    ) == {"data": "u.data", "epochs": 5, "lr": 0.1, "fast": True, "batch_size": 64}


def test_launch_runs_movielens_and_rmse_decreases() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ps_runtime.launch",
            "--ps",
            "1",
            "--workers",
            "1",
            "ps_runtime.examples.movielens:train",
            "--",
            "--epochs",
            "2",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    started = [line for line in lines if line.startswith("started role=")]
    assert len(started) == 3
    assert any("role=coordinator index=0" in line for line in started)
    assert any("role=ps index=0" in line and "address=127.0.0.1:" in line for line in started)
    rmse = [m["values"]["test_rmse"] for m in _metrics(lines) if "test_rmse" in m["values"]]
    assert len(rmse) == 2 and rmse[1] < rmse[0]
    assert any("train_loss" in m["values"] for m in _metrics(lines))


def test_launch_exits_with_coordinator_error_code() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ps_runtime.launch",
            "ps_runtime.examples.movielens:train",
            "--",
            "--data",
            "/nonexistent/u.data",
            "--epochs",
            "1",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "does not exist" in proc.stderr and "Traceback" in proc.stderr


def _start_task(
    role: str, index: int, cluster: dict[str, list[str]], token: str, **extra: str
) -> subprocess.Popen[str]:
    env = _env(
        TRAINHUB_JOB_ID="7",
        TRAINHUB_TASK_ID=f"{role}{index}",
        TRAINHUB_ROLE=role,
        TRAINHUB_TASK_INDEX=str(index),
        TRAINHUB_CLUSTER=json.dumps(cluster),
        TRAINHUB_JOB_TOKEN=token,
        **extra,
    )
    if role != "coordinator":
        env["TRAINHUB_BIND"] = cluster[role][index]
    pass_fds = (int(extra["TRAINHUB_METRICS_FD"]),) if "TRAINHUB_METRICS_FD" in extra else ()
    return subprocess.Popen(
        [sys.executable, "-m", "ps_runtime.task"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=pass_fds,
    )


def test_task_protocol_env_with_metrics_pipe() -> None:
    ps_port, worker_port = free_ports(2)
    cluster = {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]}
    token = "job-token"
    servers = [_start_task("ps", 0, cluster, token), _start_task("worker", 0, cluster, token)]
    read_fd, write_fd = os.pipe()
    try:
        coordinator = _start_task(
            "coordinator",
            0,
            cluster,
            token,
            TRAINHUB_METRICS_FD=str(write_fd),
            TRAINHUB_ENTRYPOINT="ps_runtime.examples.movielens:train",
            TRAINHUB_ARGS=json.dumps({"epochs": 2, "dim": 8}),
        )
        os.close(write_fd)
        with os.fdopen(read_fd) as pipe:
            metrics = [json.loads(line) for line in pipe]
        out, err = coordinator.communicate(timeout=120)
        assert coordinator.returncode == 0, out + err
        points = [m for m in metrics if "values" in m]
        # The rest is for stall detection: closures completed, evaluation phases.
        assert {next(iter(m)) for m in metrics if "values" not in m} == {"progress", "phase"}
        assert all(set(m) == {"step", "time", "values"} for m in points)
        rmse = [m for m in points if "test_rmse" in m["values"]]
        assert len(rmse) == 2
        assert rmse[1]["values"]["test_rmse"] < rmse[0]["values"]["test_rmse"]
        assert rmse[0]["step"] < rmse[1]["step"]
        assert not _metrics(out.splitlines())  # metrics went to the pipe, not stdout
    finally:
        for proc in servers:
            proc.terminate()
        for proc in servers:
            proc.wait(timeout=15)
    assert [p.returncode for p in servers] == [0, 0]  # graceful SIGTERM stop


def test_task_coordinator_names_missing_address() -> None:
    port, worker_port = free_ports(2)
    cluster = {"ps": [f"127.0.0.1:{port}"], "worker": [f"127.0.0.1:{worker_port}"]}
    proc = _start_task(
        "coordinator",
        0,
        cluster,
        "tok",
        TRAINHUB_STARTUP_TIMEOUT="1",
        TRAINHUB_ENTRYPOINT="ps_runtime.examples.movielens:train",
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"ps at 127.0.0.1:{port}" in err and f"worker at 127.0.0.1:{worker_port}" in err


def test_task_rejects_bad_role() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ps_runtime.task"],
        cwd=ROOT,
        env=_env(TRAINHUB_ROLE="chief"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "TRAINHUB_ROLE='chief'" in proc.stderr


def test_task_on_a_taken_port_says_what_to_do() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "ps_runtime.task"],
            env=_env(TRAINHUB_ROLE="worker", TRAINHUB_BIND=address, TRAINHUB_JOB_TOKEN="t"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert f"cannot listen on {address}: the port is in use" in done.stderr
    assert f"on node {socket.gethostname()} (port {address.rpartition(':')[2]}" in done.stderr
