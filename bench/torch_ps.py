"""The PyTorch examples (`examples/torch_recsys/`) on the PS runtime, beside their references.

    .venv/bin/python bench/torch_ps.py --tf-python /path/to/tfvenv/bin/python [--runs 5]
        [--data DIR] [--quick] [--no-tf] [--only mf|dlrm]

**mf**: the torch MF example (`examples.torch_recsys.mf:train`) on ml-100k u1 (`--data`,
default ../shared/datasets/ml-100k), 1 PS + 2 workers + the coordinator as separate
processes (`python -m ps_runtime.launch`, as bench/movielens.py runs the numpy MF),
alternating with TensorFlow's `mf` workload (../shared/baselines/tf_ps/bench.py, run by
`--tf-python`, a TensorFlow CPU 2.21 interpreter in a virtualenv of its own, through
bench/tf_side.py) with every setting and the cluster size passed: ours, TF, ours, TF, ...
`--runs` times each, so both see the same load (`--vary-seed`: our run i trains with seed
i, independent draws like TF's unseeded shuffles). The example gets TF's workload (20
epochs, dim 32, batch 1024, Adagrad lr 0.03 on the PS, λ = λ_b = 0.05, init
N(0, 0.01²)) through whichever of its keyword arguments exist; the output lists each
setting as passed, left at an equal default, or not matched. Throughput on both
sides is TF's definition: examples of epochs 2..N over their wall time (evaluation
untimed), when the example reports `epoch_seconds`; otherwise its own `examples_per_sec`
(said in `ours_metric`). Our final test RMSE must be at most TF's in the same pair of
runs (`rmse_ok`).

**dlrm** (bench/torch_dlrm.py): the DLRM-style example as a job
(`examples.torch_recsys.dlrm:train`, 1 PS + 2 workers + coordinator) alternating with the
same model trained in one plain-torch process (its local reference function, the
ceiling), same arguments; examples/s, test AUC and job / local.

`--quick`: one run each with short training (a smoke check, not a figure). Prints one
JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import tf_side  # noqa: E402
from example_args import accepted, import_example, match_settings  # noqa: E402
from runs import run_job  # noqa: E402
from tf_side import load_avg, log  # noqa: E402
from torch_dlrm import DLRM_MODULE, bench_dlrm, dlrm_local_name  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "ml-100k"

MF_MODULE = "examples.torch_recsys.mf"
MF_TRAIN = "train"

# TensorFlow's `mf` defaults (tf_ps/bench.py mf -h): setting -> (value, names the torch
# example may give it; the first one its signature has is passed).
TF_MF: dict[str, tuple[Any, tuple[str, ...]]] = {
    "epochs": (20, ("epochs",)),
    "dim": (32, ("dim", "embedding_dim")),
    "batch_size": (1024, ("batch_size",)),
    "optimizer": ("adagrad", ("optimizer",)),
    "lr": (0.03, ("lr", "learning_rate")),
    "adagrad_init": (1e-6, ("initial_accumulator", "adagrad_init", "initial_accumulator_value")),
    "reg": (0.05, ("l2", "reg", "weight_decay")),
    "reg_bias": (0.05, ("bias_l2", "reg_bias")),
    "init_std": (0.01, ("init_std",)),
}
# TF settings the example fixes instead of taking them as arguments: what to check in the
# example's source or the runtime, and what to say when it holds.
MF_FIXED: dict[str, tuple[Callable[[str], bool], str]] = {
    "optimizer": (
        lambda source: "Adagrad(" in source,
        "not an argument: the example's tables use ps_runtime's Adagrad on the PS",
    ),
    "adagrad_init": (
        lambda source: _adagrad_defaults() == (1e-6, 1e-7),
        "not an argument: ps_runtime's Adagrad starts its accumulators at 1e-06 and adds "
        "epsilon 1e-07, as TF's SparseAdagrad does",
    ),
}
# Not TF settings: what keeps the example's side comparable (TF reports nothing per step).
MF_EXTRA = {"report_every": 1_000_000}
QUICK_MF_EPOCHS = 3


# ---------------------------------------------------------------------------------------
# preconditions, each with what to do
# ---------------------------------------------------------------------------------------


def need_data(data: Path) -> None:
    missing = [n for n in ("u1.base", "u1.test") if not (data / n).is_file()]
    if missing:
        raise SystemExit(
            f"torch_ps: {', '.join(missing)} not found in {data}: pass --data DIR, a folder "
            "holding ml-100k's u1.base and u1.test (the shared copy is "
            "../shared/datasets/ml-100k beside the checkout)"
        )


def need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit(
            f"torch_ps: PyTorch is not installed in {sys.executable}: "
            f'{sys.executable} -m pip install -e "{REPO}[torch]"'
        ) from None


def _adagrad_defaults() -> tuple[float, float]:
    from ps_runtime.server.optimizers import Adagrad

    return Adagrad.defaults["initial_accumulator"], Adagrad.defaults["epsilon"]


# ---------------------------------------------------------------------------------------
# running one side
# ---------------------------------------------------------------------------------------


def mf_throughput(result: dict[str, Any]) -> tuple[float, str]:
    """TF's throughput definition when the result allows it, else the example's own."""
    seconds = result.get("epoch_seconds")
    per_epoch = result.get("examples_per_epoch")
    if seconds and per_epoch and len(seconds) > 1:
        timed = seconds[1:]
        return per_epoch * len(timed) / sum(timed), "epochs 2..N (TF's definition)"
    return float(result["examples_per_sec"]), "the example's examples_per_sec (all epochs)"


def run_ours_mf(data: Path, kwargs: dict[str, Any], ps: int, workers: int) -> dict[str, Any]:
    kw = {"data": str(data / "u1.base"), "test": str(data / "u1.test"), **kwargs}
    result = run_job(f"{MF_MODULE}:{MF_TRAIN}", kw, ps, workers)
    rate, metric = mf_throughput(result)
    out = {
        "examples_per_sec": round(rate),
        "metric": metric,
        "test_rmse": round(float(result["test_rmse"]), 4),
    }
    for key in ("best_test_rmse", "steps", "epochs"):
        if result.get(key) is not None:
            out[key] = round(result[key], 4) if isinstance(result[key], float) else result[key]
    if result.get("epoch_seconds"):
        out["epoch1_s"] = round(result["epoch_seconds"][0], 3)
    return out


def run_tf_mf(
    tf_python: str,
    tf_bench: Path,
    data: Path,
    wanted: dict[str, tuple[Any, tuple[str, ...]]],
    ps: int,
    workers: int,
) -> dict[str, Any]:
    """TF's `mf` with every setting of `wanted` (TF_MF's shape) passed, so a changed
    default of its bench.py cannot change the comparison, and our cluster's size."""
    settings = {setting: value for setting, (value, _) in wanted.items()}
    options = {"data": str(data), "num_ps": ps, "num_workers": workers, **settings}
    result = tf_side.run_tf(tf_python, tf_bench, "mf", options)
    return {
        "examples_per_sec": round(result["train_examples_per_sec"]),
        "test_rmse": round(result["final_test_rmse"], 4),
        "best_test_rmse": round(result["best_test_rmse"], 4),
        "epoch1_s": round(result["epoch1_time_s"], 3),
        "startup_s": round(result["startup_s"], 3),
    }


# ---------------------------------------------------------------------------------------
# the two comparisons
# ---------------------------------------------------------------------------------------


def bench_mf(args: argparse.Namespace, tf_python: str | None) -> dict[str, Any]:
    need_data(args.data)
    module = import_example(MF_MODULE)
    train = getattr(module, MF_TRAIN)
    wanted = dict(TF_MF)
    if args.quick:
        wanted["epochs"] = (QUICK_MF_EPOCHS, TF_MF["epochs"][1])
    kwargs, how = match_settings(train, wanted, MF_FIXED)
    kwargs.update(accepted(train, MF_EXTRA))
    epochs = wanted["epochs"][0]
    vary_seed = args.vary_seed and "seed" in inspect.signature(train).parameters

    def ours(i: int) -> dict[str, Any]:
        log(f"mf run {i + 1}/{args.runs}: ours ({args.ps} PS + {args.workers} workers)")
        if vary_seed:  # independent runs, as TF's unseeded shuffles make its own
            kwargs["seed"] = i
        result = run_ours_mf(args.data, kwargs, args.ps, args.workers)
        log(f"  ours {result['examples_per_sec']:,} examples/s, RMSE {result['test_rmse']}")
        return result

    def tf(i: int) -> dict[str, Any]:
        assert tf_python is not None
        log(f"mf run {i + 1}/{args.runs}: TensorFlow")
        result = run_tf_mf(tf_python, args.tf_bench, args.data, wanted, args.ps, args.workers)
        log(f"  TF {result['examples_per_sec']:,} examples/s, RMSE {result['test_rmse']}")
        return result

    pairs = tf_side.alternate(args.runs, ours, tf if tf_python else None)
    for pair in pairs:
        if "tf" in pair:
            pair["rmse_ok"] = pair["ours"]["test_rmse"] <= pair["tf"]["test_rmse"]
    out: dict[str, Any] = {
        "entrypoint": f"{MF_MODULE}:{MF_TRAIN}",
        "data": str(args.data),
        "ps": args.ps,
        "workers": args.workers,
        "epochs": epochs,
        "seeds": list(range(args.runs)) if vary_seed else "the example's default",
        "settings": how,
        "ours_metric": pairs[0]["ours"]["metric"],
        "runs": pairs,
        **tf_side.side_by_side(pairs, "examples_per_sec"),
        **tf_side.side_by_side(pairs, "test_rmse"),
    }
    if tf_python:
        out.update(
            ratio=tf_side.ratio(out, "examples_per_sec"),
            rmse_ok_every_run=all(p["rmse_ok"] for p in pairs),
            rmse_ok_medians=out["ours_test_rmse_median"] <= out["tf_test_rmse_median"],
        )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ml-100k folder")
    tf_side.add_arguments(parser)
    parser.add_argument(
        "--runs",
        type=int,
        help=f"runs of each side (default {tf_side.DEFAULT_RUNS}; 1 with --quick)",
    )
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=("mf", "dlrm"), help="one of the two comparisons")
    parser.add_argument("--quick", action="store_true", help="smoke check: 1 short run each")
    parser.add_argument(
        "--vary-seed",
        action="store_true",
        help="mf: seed = run index (0, 1, ...) so our runs vary as TF's do; default: the "
        "example's default seed every run",
    )
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 1 if args.quick else tf_side.DEFAULT_RUNS
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.data = args.data.resolve()  # TF's bench.py reads a relative path from its folder
    need_torch()
    do_mf, do_dlrm = args.only in (None, "mf"), args.only in (None, "dlrm")
    tf_python = None
    if do_mf:  # every precondition before the first run
        need_data(args.data)
        import_example(MF_MODULE)
        if not args.no_tf:
            tf_python = tf_side.need_tf(args.tf_python, args.tf_bench)
    if do_dlrm:
        dlrm_local_name(import_example(DLRM_MODULE))
    report: dict[str, Any] = {
        "bench": "torch_ps",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "load_avg_start": load_avg(),
    }
    started = time.perf_counter()
    if do_mf:
        report["mf"] = bench_mf(args, tf_python)
    if do_dlrm:
        report["dlrm"] = bench_dlrm(args)
    report["load_avg_end"] = load_avg()
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
