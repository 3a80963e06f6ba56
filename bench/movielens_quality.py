"""Test RMSE of the AutoRec MovieLens example on ml-100k u1, run as TrainHub jobs.

Starts `trainhub standalone` (SQLite, embedded broker, a local agent) in a temporary data
directory, submits `ps_runtime.examples.movielens_autorec:train` on u1.base/u1.test with
2 PS shards and 2 workers `--runs` times (seed = run index: held-out slice and initial
weights differ), one job after another, and reads each job's
final test RMSE from the `{"result": …}` line its coordinator logged. Prints one JSON line
per run and a summary with the median.

    .venv/bin/python bench/movielens_quality.py [--data DIR] [--runs 3] [--ps 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared"
ENTRYPOINT = "ps_runtime.examples.movielens_autorec:train"
TERMINAL = {"succeeded", "failed", "cancelled"}


class Standalone:
    """`python -m trainhub.cli standalone` on a data directory of its own."""

    def __init__(self, data_dir: Path) -> None:
        from ps_runtime.launch.local import free_ports

        port, password = free_ports(1)[0], secrets.token_urlsafe(12)
        low = random.randrange(20000, 32000, 100)
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
        env.update(
            TRAINHUB_DATA_DIR=str(data_dir),
            TRAINHUB_ADMIN_PASSWORD=password,
            TRAINHUB_TASK_PORT_MIN=str(low),
            TRAINHUB_TASK_PORT_MAX=str(low + 99),
        )
        self.log = (data_dir.parent / "standalone.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainhub.cli", "standalone", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        try:
            token = self._token(password, timeout=120)
        except BaseException:
            self.stop()
            raise
        self.api = httpx.Client(
            base_url=f"{self.url}/api/v1", headers={"Authorization": f"Token {token}"}
        )

    def _token(self, password: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"standalone exited with {self.proc.returncode}")
            try:
                response = httpx.post(
                    f"{self.url}/api/v1/auth/token/",
                    json={"username": "admin", "password": password},
                )
                if response.status_code in (200, 201):
                    return str(response.json()["token"])
            except httpx.TransportError:
                pass
            time.sleep(1.0)
        raise SystemExit(f"standalone did not come up in {timeout}s")

    def run_job(self, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
        response = self.api.post("/jobs/", json=spec)
        if response.status_code != 201:
            raise SystemExit(f"submit failed: {response.status_code} {response.text}")
        job_id = int(response.json()["id"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job: dict[str, Any] = self.api.get(f"/jobs/{job_id}/").json()
            if job["state"] in TERMINAL:
                return {"id": job_id, "state": job["state"], "result": self.result(job_id)}
            time.sleep(2.0)
        raise SystemExit(f"job {job_id} not finished after {timeout}s")

    def result(self, job_id: int) -> Any:
        """The entrypoint's return value from the coordinator's `{"result": …}` log line."""
        params: dict[str, str | int] = {"source": "coordinator-0", "q": '{"result": ', "tail": 1}
        lines = self.api.get(f"/jobs/{job_id}/logs/", params=params).json()["lines"]
        for entry in reversed(lines):
            text = entry["line"] if isinstance(entry, dict) else str(entry)
            start = text.find('{"result": ')
            if start >= 0:
                return json.loads(text[start:])["result"]
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def job_spec(data: Path, ps: int, workers: int, run: int) -> dict[str, Any]:
    small = {"cpu": 0.25, "memory_mb": 1024}
    return {
        "name": f"autorec-u1-{run}",
        "team": "default",
        "entrypoint": ENTRYPOINT,
        "args": {"data": str(data / "u1.base"), "test": str(data / "u1.test"), "seed": run},
        "parameter_servers": {"replicas": ps, "resources": small},
        "workers": {"min": workers, "resources": small},
        "coordinator": {"resources": small},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=SHARED / "datasets" / "ml-100k")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per job")
    args = parser.parse_args()
    data = args.data.resolve()
    if not (data / "u1.base").exists():
        raise SystemExit(f"{data}/u1.base not found; pass --data DIR (ml-100k)")
    runs = []
    with tempfile.TemporaryDirectory(prefix="trainhub-quality-") as tmp:
        server = Standalone(Path(tmp) / "var")
        try:
            for run in range(args.runs):
                start = time.monotonic()
                job = server.run_job(job_spec(data, args.ps, args.workers, run), args.timeout)
                result = job["result"] or {}
                row = {
                    "run": run,
                    "job": job["id"],
                    "state": job["state"],
                    "test_rmse": result.get("test_rmse"),
                    "test_rmse_item": result.get("test_rmse_item"),
                    "blend_weight": result.get("blend_weight"),
                    "epochs_per_view": result.get("epochs_per_view"),
                    "examples_per_sec": result.get("examples_per_sec"),
                    "train_seconds": result.get("train_seconds"),
                    "job_seconds": round(time.monotonic() - start, 1),
                }
                runs.append(row)
                print(json.dumps(row), flush=True)
        finally:
            server.stop()
    rmses = [r["test_rmse"] for r in runs if r["test_rmse"] is not None]
    summary = {
        "summary": "movielens_autorec_u1",
        "runs": len(runs),
        "succeeded": sum(r["state"] == "succeeded" for r in runs),
        "test_rmse_median": statistics.median(rmses) if rmses else None,
        "job_seconds_median": statistics.median(r["job_seconds"] for r in runs),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
