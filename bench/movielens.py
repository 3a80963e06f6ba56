"""The `mf` workload of ../shared/baselines/tensorflow_ps.md on TrainHub's PS runtime, side
by side with TensorFlow's.

Biased MF on ml-100k u1.base/u1.test, 1 PS + 2 workers as separate processes
(`python -m ps_runtime.launch`), Adagrad lr 0.03 on the PS, batches of 1024,
λ = λ_b = 0.05, init N(0, 0.01²), dim 32, 20 epochs. Throughput is examples over epochs
2..N divided by their wall time (schedule to join; evaluation not timed), as in the
baseline. Each run of ours alternates with one of TensorFlow's `mf` (the baseline's
tf_ps/bench.py, run by `--tf-python`) with the same settings and cluster. Prints one JSON
line per pair and a summary line with both medians (throughput and final test RMSE),
every run's figures and `ratio` (ours / TF throughput).

    .venv/bin/python bench/movielens.py --tf-python ~/tfvenv/bin/python [--data DIR]
        [--runs 5] [--workers 2] [--ps 1] [--replication R] [--tf-bench PATH] [--no-tf]

`--replication R` keeps every shard on R backups too (needs --ps > R): what replication
costs (TF has none; its side runs the same PS count without).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import tf_side  # noqa: E402
from runs import run_job  # noqa: E402

ENTRY = "ps_runtime.examples.movielens:train"
# The workload, in our example's argument names; TF_NAMES gives TF's option for each.
WORKLOAD: dict[str, Any] = {
    "epochs": 20,
    "dim": 32,
    "lr": 0.03,
    "batch_size": 1024,
    "l2": 0.05,
    "bias_l2": 0.05,
    "init_std": 0.01,
}
TF_NAMES = {"l2": "reg", "bias_l2": "reg_bias"}
REPORT_EVERY = 1_000_000  # no per-step metric lines: TF reports none either


def tf_options(data: Path, ps: int, workers: int) -> dict[str, Any]:
    """TF's `mf` with our cluster and workload; its optimizer is ours: the PS's Adagrad,
    accumulators starting at its initial value (TF's --adagrad-init)."""
    from ps_runtime.server.optimizers import Adagrad

    return {
        "data": str(data),
        "num_ps": ps,
        "num_workers": workers,
        **{TF_NAMES.get(k, k): v for k, v in WORKLOAD.items()},
        "optimizer": "adagrad",
        "adagrad_init": Adagrad.defaults["initial_accumulator"],
    }


def run_once(data: Path, ps: int, workers: int, replication: int = 0) -> dict[str, Any]:
    kwargs = {
        "data": str(data / "u1.base"),
        "test": str(data / "u1.test"),
        **WORKLOAD,
        "report_every": REPORT_EVERY,
    }
    result = run_job(ENTRY, kwargs, ps, workers, replication)
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


def tf_summary(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "workload": "mf",
        "ps": result["num_ps"],
        "workers": result["num_workers"],
        "examples_per_sec": round(result["train_examples_per_sec"]),
        "epoch1_s": round(result["epoch1_time_s"], 3),
        "epoch_s_median": round(result["steady_epoch_time_s_median"], 3),
        "test_rmse": round(result["final_test_rmse"], 4),
        "best_test_rmse": round(result["best_test_rmse"], 4),
        "startup_s": result["startup_s"],
        "tf_version": result.get("tf_version"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/datasets/ml-100k")
    parser.add_argument("--runs", type=int, default=tf_side.DEFAULT_RUNS, help="of each side")
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--replication", type=int, default=0, help="backups per shard")
    tf_side.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.data = args.data.resolve()  # TF's bench.py reads a relative path from its folder
    missing = [n for n in ("u1.base", "u1.test") if not (args.data / n).is_file()]
    if missing:
        raise SystemExit(
            f"movielens.py: {', '.join(missing)} not found in {args.data}: pass --data DIR, "
            "a folder holding ml-100k's u1.base and u1.test"
        )
    tf_python = None if args.no_tf else tf_side.need_tf(args.tf_python, args.tf_bench)
    options = tf_options(args.data, args.ps, args.workers)

    def ours(i: int) -> dict[str, Any]:
        tf_side.log(f"run {i + 1}/{args.runs}: ours ({args.ps} PS + {args.workers} workers)")
        return run_once(args.data, args.ps, args.workers, args.replication)

    def tf(i: int) -> dict[str, Any]:
        assert tf_python is not None
        tf_side.log(f"run {i + 1}/{args.runs}: TensorFlow")
        return tf_summary(tf_side.run_tf(tf_python, args.tf_bench, "mf", options))

    pairs = tf_side.alternate(
        args.runs, ours, tf if tf_python else None, lambda pair: print(json.dumps(pair), flush=True)
    )
    summary: dict[str, Any] = {
        "summary": "mf",
        "ps": args.ps,
        "workers": args.workers,
        "replication": args.replication,
        "runs": len(pairs),
        "workload": WORKLOAD,
        "tf_options": options if tf_python else None,
        **tf_side.side_by_side(pairs, "examples_per_sec"),
        **tf_side.side_by_side(pairs, "test_rmse"),
    }
    summary["ratio"] = tf_side.ratio(summary, "examples_per_sec")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
