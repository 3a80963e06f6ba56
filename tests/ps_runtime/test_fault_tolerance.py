"""`python -m ps_runtime.launch` runs of MovieLens MF that survive a SIGKILLed worker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--epochs", "6", "--seed", "3"]


def run_movielens(kill_worker_after_epoch: int | None = None) -> tuple[dict[str, Any], str]:
    """Run launch with 2 PS and 3 workers; optionally SIGKILL worker 1 after an epoch."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ps_runtime.launch", "--ps", "2", "--workers", "3",
         "ps_runtime.examples.movielens:train", "--", *ARGS],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    worker_pids: dict[int, int] = {}
    result: dict[str, Any] | None = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        started = re.match(r"started role=worker index=(\d+) pid=(\d+)", line)
        if started:
            worker_pids[int(started[1])] = int(started[2])
        payload = line.split("] ", 1)[-1]
        if not payload.startswith("{"):
            continue
        record = json.loads(payload)
        epoch = record.get("values", {}).get("epoch")
        if kill_worker_after_epoch is not None and epoch == kill_worker_after_epoch:
            os.kill(worker_pids[1], signal.SIGKILL)
        if "result" in record:
            result = record["result"]
    output = "".join(lines)
    assert proc.wait(timeout=300) == 0, output[-4000:]
    assert result is not None, output[-4000:]
    return result, output


def test_worker_killed_halfway_loses_no_step_and_matches_rmse() -> None:
    clean, _ = run_movielens()
    disturbed, output = run_movielens(kill_worker_after_epoch=3)
    assert "re-queueing" in output, "no closure was in flight on the killed worker"
    for result in (clean, disturbed):
        assert result["completed_steps"] == result["steps"]
        assert result["examples_per_sec"] > 0
    assert abs(disturbed["test_rmse"] - clean["test_rmse"]) <= 0.01, (clean, disturbed)
