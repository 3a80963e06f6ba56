"""`python -m ps_runtime.launch` runs of MovieLens MF that survive a SIGKILLed worker, and
that resume from their checkpoint after a SIGKILLed parameter server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
ARGS = ["--epochs", "6", "--seed", "3"]


@dataclass
class Run:
    code: int
    result: dict[str, Any] | None
    output: str


def run_movielens(
    *,
    ps: int = 2,
    workers: int = 3,
    launch_args: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    kill: tuple[str, int, int] | None = None,
) -> Run:
    """Run launch; `kill=(role, index, epoch)` SIGKILLs that task once `epoch` is reported."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ps_runtime.launch",
            "--ps",
            str(ps),
            "--workers",
            str(workers),
            *launch_args,
            "ps_runtime.examples.movielens:train",
            "--",
            *ARGS,
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    pids: dict[tuple[str, int], int] = {}
    result: dict[str, Any] | None = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        started = re.match(r"started role=(\w+) index=(\d+) pid=(\d+)", line)
        if started:
            pids[(started[1], int(started[2]))] = int(started[3])
        payload = line.split("] ", 1)[-1]
        if not payload.startswith("{"):
            continue
        record = json.loads(payload)
        epoch = record.get("values", {}).get("epoch")
        if kill is not None and epoch == kill[2]:
            os.kill(pids[(kill[0], kill[1])], signal.SIGKILL)
        if "result" in record:
            result = record["result"]
    return Run(proc.wait(timeout=300), result, "".join(lines))


def test_worker_killed_halfway_loses_no_step_and_matches_rmse() -> None:
    clean = run_movielens()
    disturbed = run_movielens(kill=("worker", 1, 3))
    assert "re-queueing" in disturbed.output, "no closure was in flight on the killed worker"
    for run in (clean, disturbed):
        assert run.code == 0 and run.result is not None, run.output[-4000:]
        assert run.result["completed_steps"] == run.result["steps"]
        assert run.result["examples_per_sec"] > 0
    assert clean.result is not None and disturbed.result is not None
    assert abs(disturbed.result["test_rmse"] - clean.result["test_rmse"]) <= 0.01


def test_killed_ps_is_named_and_a_rerun_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    launch_args = ("--checkpoint-dir", str(tmp_path / "ckpt"))
    args = ("--checkpoint_every_seconds", "0")  # save at every epoch end
    crashed = run_movielens(ps=2, workers=2, launch_args=launch_args, args=args, kill=("ps", 1, 3))
    assert crashed.code == 75, crashed.output[-4000:]  # EX_TEMPFAIL: restart from checkpoint
    assert re.search(
        r"UnavailableError: parameter server 1 at 127\.0\.0\.1:\d+ is unavailable", crashed.output
    ), crashed.output[-4000:]

    resumed = run_movielens(ps=2, workers=2, launch_args=launch_args, args=args)
    assert resumed.code == 0, resumed.output[-4000:]
    saved = re.search(r"resumed from checkpoint \S+ at step (\d+)", resumed.output)
    assert saved is not None, resumed.output[-4000:]
    assert resumed.result is not None
    assert int(saved[1]) == resumed.result["resumed_from_step"] > 0
    # Only the epochs after the checkpoint ran again, and training finished.
    assert len(resumed.result["test_rmse_history"]) < 6
    assert resumed.result["steps"] == resumed.result["completed_steps"]
    assert resumed.result["test_rmse"] < 1.0
