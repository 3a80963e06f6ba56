"""How long a task takes from its placement to its process running, through the agent's
real task-starting code (`Supervisor.start` with the node's isolation, as root).

The task's command prints the time its interpreter starts running it; the figure is that
minus the moment `start` was called (the agent got the desired task): the task directory,
identity, cgroup, wrapper, sandbox and interpreter start-up together.

    sudo .venv/bin/python bench/task_start.py --runs 20 [--baseline DIR]

`--baseline DIR`: a checkout of other code (e.g. `git worktree add /tmp/before <commit>`)
measured in the same run, alternating with this one, so that the two figures share the
machine's load. Prints one JSON object: each variant's median and samples in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PER_PROCESS = 5  # starts measured per agent process (after one warm-up start)


def measure(count: int) -> list[float]:
    """Start `count` tasks (after a warm-up) through this checkout's agent; ms each."""
    from ps_runtime.agent.isolation import Isolation
    from ps_runtime.agent.outbox import Outbox
    from ps_runtime.agent.protocol import DesiredTask
    from ps_runtime.agent.supervisor import Supervisor
    from ps_runtime.taskenv import Role

    base = Path(tempfile.mkdtemp(prefix="trainhub-bench-", dir="/tmp"))
    base.chmod(0o711)
    try:
        isolation = Isolation.from_settings(base / "agent", {"TRAINHUB_TASK_ISOLATION": "required"})
        code = "import time; print(repr(time.time()), flush=True)"
        outbox = Outbox()
        supervisor = Supervisor(
            outbox, base / "agent", command=[isolation.python, "-c", code], isolation=isolation
        )
        samples: list[float] = []
        for attempt in range(count + 1):
            task = DesiredTask(
                id=1, attempt=attempt, job_id=1, role=Role.PS, index=0, cpu=0.5, memory_mb=256
            )
            started = time.time()
            assert supervisor.start(task) is not None, [m.to_wire() for m in outbox.drain()]
            printed = _first_line(outbox, task.id, attempt)
            if attempt:  # the first start warms the page cache
                samples.append((float(printed) - started) * 1000)
            assert supervisor.wait_gone(task.key, 10)
        return samples
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _first_line(outbox: object, task_id: int, attempt: int, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in outbox.drain():  # type: ignore[attr-defined]
            wire = message.to_wire()
            if wire["type"] == "logs" and (wire["id"], wire["attempt"]) == (task_id, attempt):
                return str(wire["lines"][0])
        time.sleep(0.001)
    raise SystemExit(f"task {task_id} attempt {attempt} printed nothing in {timeout} s")


def run_variant(checkout: Path, count: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--one", str(count)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {done.stderr[-2000:]}")
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="starts measured per variant")
    parser.add_argument("--baseline", type=Path, help="a checkout to measure alongside")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return
    if os.geteuid() != 0:
        raise SystemExit("run as root: a root agent's start (identity, cgroup) is measured")
    variants = {"this": ROOT}
    if args.baseline is not None:
        variants["baseline"] = args.baseline.resolve()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    while any(len(s) < args.runs for s in samples.values()):
        for name, checkout in variants.items():
            count = min(PER_PROCESS, args.runs - len(samples[name]))
            if count > 0:
                samples[name] += run_variant(checkout, count)
    result: dict[str, object] = {"runs": args.runs}
    for name, values in samples.items():
        result[name] = {
            "median_ms": round(statistics.median(values), 1),
            "samples_ms": [round(v, 1) for v in values],
        }
    if "baseline" in samples:
        delta = statistics.median(samples["this"]) - statistics.median(samples["baseline"])
        result["added_ms"] = round(delta, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
