"""Preemption as the platform does it, with `python -m ps_runtime.task` processes: only the
coordinator gets SIGTERM, saves a checkpoint where it is and exits 0; the job restarted
with the same checkpoint directory finishes exactly its epochs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.launch.local import free_ports
from ps_runtime.server import checkpoint

ROOT = Path(__file__).resolve().parents[3]
BATCH_SIZE = 512
EPOCHS = 3
TRAIN_ARGS = {
    "epochs": EPOCHS,
    "dim": 8,
    "report_every": 5,
    "batch_size": BATCH_SIZE,
    "checkpoint_every_seconds": 3600,
}  # only the stop and the end save
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


class Task:
    """One `python -m ps_runtime.task` process; stdout and stderr merged, read as it runs."""

    def __init__(
        self,
        role: str,
        index: int,
        cluster: dict[str, list[str]],
        checkpoint_dir: Path | None,
        **extra: str,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHUB_")}
        env.update(
            PYTHONPATH=str(ROOT),
            TRAINHUB_JOB_ID="7",
            TRAINHUB_TASK_ID=f"{role}{index}",
            TRAINHUB_ROLE=role,
            TRAINHUB_TASK_INDEX=str(index),
            TRAINHUB_CLUSTER=json.dumps(cluster),
            TRAINHUB_JOB_TOKEN="job-token",
            **extra,
        )
        if checkpoint_dir is not None:
            env["TRAINHUB_CHECKPOINT_DIR"] = str(checkpoint_dir)
        if role != "coordinator":
            env["TRAINHUB_BIND"] = cluster[role][index]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ps_runtime.task"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, predicate: Callable[[str], bool], timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            ended = not self._reader.is_alive()  # then every line is in self.lines
            for line in self.lines[seen:]:
                if predicate(line):
                    return line
                seen += 1
            if ended or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        raise AssertionError(f"no such line; output:\n{self.output[-4000:]}")

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def sigterm(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def result(self) -> dict[str, Any]:
        line = self.wait_line(lambda x: x.startswith('{"result"'), timeout=0)
        return dict(json.loads(line)["result"])


class Job:
    """A job's PS and worker tasks on fresh ports; `coordinator()` starts its coordinator."""

    def __init__(self, checkpoint_dir: Path | None) -> None:
        ps, worker = free_ports(2)
        self.cluster = {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}
        self.checkpoint_dir = checkpoint_dir
        self.servers = [Task(role, 0, self.cluster, checkpoint_dir) for role in ("ps", "worker")]

    def coordinator(
        self,
        entrypoint: str = "ps_runtime.examples.movielens:train",
        args: dict[str, Any] | None = None,
    ) -> Task:
        return Task(
            "coordinator",
            0,
            self.cluster,
            self.checkpoint_dir,
            TRAINHUB_ENTRYPOINT=entrypoint,
            TRAINHUB_ARGS=json.dumps(TRAIN_ARGS if args is None else args),
        )

    def stop(self) -> list[int]:
        for task in self.servers:
            if task.proc.poll() is None:
                task.sigterm()
        return [task.wait(15) for task in self.servers]


@pytest.fixture
def jobs() -> Iterator[Callable[[Path | None], Job]]:
    started: list[Job] = []

    def start(checkpoint_dir: Path | None) -> Job:
        started.append(Job(checkpoint_dir))
        return started[-1]

    yield start
    for job in started:
        job.stop()


def _train_loss_at(step: int) -> Callable[[str], bool]:
    def match(line: str) -> bool:
        if not line.startswith("{"):
            return False
        record = json.loads(line)
        return "train_loss" in record.get("values", {}) and record["step"] >= step

    return match


def test_preempted_coordinator_saves_and_exits_0_and_the_restarted_job_resumes(
    jobs: Callable[[Path | None], Job], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    job = jobs(ckpt)
    coordinator = job.coordinator()
    coordinator.wait_line(_train_loss_at(70))  # in the second epoch (63 steps each)
    coordinator.sigterm()
    sent = time.monotonic()
    assert coordinator.wait(timeout=30) == 0, coordinator.output[-4000:]
    assert time.monotonic() - sent < 10
    stopped = re.search(
        r"stopped on request at step (\d+) after saving checkpoint (\S+)", coordinator.output
    )
    assert stopped is not None, coordinator.output[-4000:]
    step = int(stopped[1])
    assert stopped[2] == f"step-{step:012d}"
    assert not any(x.startswith('{"result"') for x in coordinator.lines)
    newest = checkpoint.latest(str(ckpt))
    assert newest is not None and os.path.basename(newest) == stopped[2]
    assert checkpoint.read_manifest(newest)["step"] == step
    # Only the coordinator was stopped: its PS and worker still serve, then stop cleanly.
    assert [t.proc.poll() for t in job.servers] == [None, None]
    assert job.stop() == [0, 0]

    rerun = jobs(ckpt).coordinator()
    assert rerun.wait(timeout=120) == 0, rerun.output[-4000:]
    resumed = re.search(r"^resumed from checkpoint (\S+) at step (\d+)$", rerun.output, re.M)
    assert resumed is not None and (resumed[1], int(resumed[2])) == (stopped[2], step)
    result = rerun.result()
    steps_per_epoch = result["examples_per_epoch"] // BATCH_SIZE
    assert 0 < step < EPOCHS * steps_per_epoch
    assert result["resumed_from_step"] == step
    assert result["steps"] == result["completed_steps"] == EPOCHS * steps_per_epoch
    assert len(result["test_rmse_history"]) == EPOCHS - step // steps_per_epoch


def test_entrypoint_that_never_asks_exits_143_at_once(
    jobs: Callable[[Path | None], Job], tmp_path: Path
) -> None:
    coordinator = jobs(tmp_path / "ckpt").coordinator(
        "tests.ps_runtime.entrypoints:train_without_stop_requests", {}
    )
    coordinator.wait_line(lambda x: x == "training")
    coordinator.sigterm()
    assert coordinator.wait(timeout=5) == 143, coordinator.output[-4000:]
    assert "terminated by SIGTERM" in coordinator.output
    assert checkpoint.latest(str(tmp_path / "ckpt")) is None


def test_without_a_checkpoint_dir_sigterm_exits_143_at_once(
    jobs: Callable[[Path | None], Job],
) -> None:
    coordinator = jobs(None).coordinator()
    coordinator.wait_line(_train_loss_at(20))
    coordinator.sigterm()
    assert coordinator.wait(timeout=5) == 143, coordinator.output[-4000:]
    assert "terminated by SIGTERM" in coordinator.output


def test_cancel_stops_a_coordinator_whose_ps_stops_with_it_within_seconds(
    jobs: Callable[[Path | None], Job], tmp_path: Path
) -> None:
    job = jobs(tmp_path / "ckpt")
    coordinator = job.coordinator()
    coordinator.wait_line(_train_loss_at(20))
    sent = time.monotonic()
    for task in (coordinator, *job.servers):  # a cancel stops every task at once
        task.sigterm()
    code = coordinator.wait(timeout=30)
    assert time.monotonic() - sent < 5, coordinator.output[-4000:]
    # Saved before the PS went (0), or stopped without a checkpoint (143): never a hang.
    if code == 0:
        assert "stopped on request" in coordinator.output
    else:
        assert code == 143, coordinator.output[-4000:]
        assert "terminated by SIGTERM" in coordinator.output
