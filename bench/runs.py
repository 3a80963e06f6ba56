"""Running one side of a benchmark: any command with a time limit, a job through
`python -m ps_runtime.launch`, a function in a fresh interpreter; and reading their results.

Shared by bench/torch_ps.py, bench/movielens.py and bench/tf_side.py. Every failure stops
the bench with the command's name and the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 1200  # one training run; a hang fails the bench instead of stalling it


def bench_name() -> str:
    """The running bench's file name, to start its error messages with."""
    return Path(sys.argv[0]).name or "bench"


def run_process(
    cmd: Sequence[str],
    what: str,
    timeout: float = RUN_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run `cmd` to the end (SIGTERM after `timeout` s); its stdout, or exit naming it.

    `env` defaults to ours with the checkout on PYTHONPATH (what our jobs need).
    """
    if env is None:
        paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
        cwd=REPO,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # launch stops its processes on SIGTERM
        out, err = proc.communicate(timeout=30)
        raise SystemExit(
            f"{bench_name()}: {what} ran over {timeout:.0f} s:\n{err[-3000:]}"
        ) from None
    if proc.returncode != 0:
        raise SystemExit(f"{bench_name()}: {what} failed ({proc.returncode}):\n{err[-3000:]}")
    return out


def result_line(stdout: str, what: str) -> dict[str, Any]:
    """The `{"result": ...}` line a task prints (launch prefixes it with the task name)."""
    for line in reversed(stdout.splitlines()):
        payload = line.split("] ", 1)[-1]
        if payload.startswith('{"result"'):
            result: dict[str, Any] = json.loads(payload)["result"]
            return result
    raise SystemExit(f"{bench_name()}: no result line from {what}:\n{stdout[-3000:]}")


def cli_args(kwargs: Mapping[str, Any]) -> list[str]:
    """`--key value` pairs as ps_runtime.launch parses them after `--`."""
    out: list[str] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out += [f"--{key}", text]
    return out


def reports(stdout: str) -> list[dict[str, Any]]:
    """The values of every metric line (`ps_runtime.report`) the coordinator printed."""
    found = []
    for line in stdout.splitlines():
        prefix, _, payload = line.partition("] ")
        if prefix.startswith("[coordinator") and payload.startswith('{"step"'):
            line_json = json.loads(payload)
            found.append(
                {"step": line_json["step"], "time": line_json["time"], **line_json["values"]}
            )
    return found


def run_job(
    entry: str,
    kwargs: Mapping[str, Any],
    ps: int,
    workers: int,
    replication: int = 0,
    timeout: float = RUN_TIMEOUT_S,
) -> dict[str, Any]:
    """One job through `python -m ps_runtime.launch`; the coordinator's result, with the
    metric lines it printed under `_reports`."""
    cmd = [sys.executable, "-m", "ps_runtime.launch", "--ps", str(ps), "--workers", str(workers)]
    if replication:
        cmd += ["--replication", str(replication)]
    out = run_process([*cmd, entry, "--", *cli_args(kwargs)], f"the job {entry}", timeout)
    result = result_line(out, entry)
    result["_reports"] = reports(out)
    return result


def run_local(
    module: str, function: str, kwargs: Mapping[str, Any], timeout: float = RUN_TIMEOUT_S
) -> dict[str, Any]:
    """`module.function(**kwargs)` in a fresh interpreter of its own; its result."""
    code = (
        "import json, sys\n"
        f"from {module} import {function} as fn\n"
        "print(json.dumps({'result': fn(**json.loads(sys.argv[1]))}, default=str))\n"
    )
    cmd = [sys.executable, "-c", code, json.dumps(dict(kwargs))]
    out = run_process(cmd, f"{module}.{function}", timeout)
    return result_line(out, f"{module}.{function}")
