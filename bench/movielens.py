"""The `mf` workload of ../shared/baselines/tensorflow_ps.md on TrainHub's PS runtime.

Biased MF on ml-100k u1.base/u1.test, 1 PS + 2 workers as separate processes
(`python -m ps_runtime.launch`), Adagrad lr 0.03 on the PS, batches of 1024,
λ = λ_b = 0.05, init N(0, 0.01²), 20 epochs. Throughput is examples over epochs 2..N
divided by their wall time (schedule to join; evaluation not timed), as in the baseline.
Prints one JSON line per run, plus the TF median from the baseline file when present.

    .venv/bin/python bench/movielens.py [--data DIR] [--runs 3] [--workers 2] [--ps 1]
        [--replication R]

`--replication R` keeps every shard on R backups too (needs --ps > R): what replication
costs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
WORKLOAD = [
    "--epochs",
    "20",
    "--lr",
    "0.03",
    "--batch_size",
    "1024",
    "--l2",
    "0.05",
    "--bias_l2",
    "0.05",
    "--init_std",
    "0.01",
    "--report_every",
    "1000000",
]


def tf_baseline(path: Path) -> dict[str, float] | None:
    """TF's median mf throughput and final RMSE from the baseline's results table."""
    if not path.exists():
        return None
    text = path.read_text()
    rows = {}
    for key, label in (
        ("examples_per_sec", "train throughput, epochs 2..N"),
        ("test_rmse", "final test RMSE (epoch N)"),
    ):
        match = re.search(re.escape(label) + r"[^|]*\|[^|]*\|[^|]*\|[^|]*\|\s*([\d,.]+)", text)
        if match:
            rows[key] = float(match[1].replace(",", ""))
    return rows or None


def run_once(data: Path, ps: int, workers: int, replication: int = 0) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ps_runtime.launch",
            "--ps",
            str(ps),
            "--workers",
            str(workers),
            "--replication",
            str(replication),
            "ps_runtime.examples.movielens:train",
            "--",
            "--data",
            str(data / "u1.base"),
            "--test",
            str(data / "u1.test"),
            *WORKLOAD,
        ],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"launch failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    for line in proc.stdout.splitlines():
        payload = line.split("] ", 1)[-1]
        if payload.startswith('{"result"'):
            result: dict[str, Any] = json.loads(payload)["result"]
            timed = result["epoch_seconds"][1:]
            return {
                "workload": "mf",
                "ps": ps,
                "workers": workers,
                "replication": replication,
                "examples_per_sec": round(result["examples_per_epoch"] * len(timed) / sum(timed)),
                "epoch1_s": round(result["epoch_seconds"][0], 3),
                "epoch_s_median": round(statistics.median(timed), 3),
                "test_rmse": round(result["test_rmse"], 4),
                "best_test_rmse": round(result["best_test_rmse"], 4),
            }
    raise SystemExit(f"no result line in the coordinator's output:\n{proc.stdout[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=SHARED / "datasets" / "ml-100k")
    parser.add_argument("--baseline", type=Path, default=SHARED / "baselines" / "tensorflow_ps.md")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--replication", type=int, default=0, help="backups per shard")
    args = parser.parse_args()
    if not (args.data / "u1.base").exists():
        raise SystemExit(f"{args.data}/u1.base not found; pass --data DIR (ml-100k)")
    runs = [run_once(args.data, args.ps, args.workers, args.replication) for _ in range(args.runs)]
    for run in runs:
        print(json.dumps(run), flush=True)
    tf = tf_baseline(args.baseline)
    median = statistics.median(r["examples_per_sec"] for r in runs)
    summary: dict[str, Any] = {
        "summary": "mf",
        "ps": args.ps,
        "replication": args.replication,
        "runs": len(runs),
        "examples_per_sec_median": median,
        "test_rmse_median": statistics.median(r["test_rmse"] for r in runs),
    }
    if tf:
        summary.update(
            tf_examples_per_sec=tf.get("examples_per_sec"),
            tf_test_rmse=tf.get("test_rmse"),
            speedup=round(median / tf["examples_per_sec"], 3)
            if tf.get("examples_per_sec")
            else None,
        )
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
