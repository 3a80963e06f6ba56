"""The PyTorch examples (`examples/torch_recsys/`) on the PS runtime, beside their references.

    .venv/bin/python bench/torch_ps.py --tf-python /path/to/tfvenv/bin/python [--runs 3]
        [--data DIR] [--quick] [--no-tf] [--only mf|dlrm]

**mf**: the torch MF example (`examples.torch_recsys.mf:train`) on ml-100k u1 (`--data`,
default ../shared/datasets/ml-100k), 1 PS + 2 workers + the coordinator as separate
processes (`python -m ps_runtime.launch`, as bench/movielens.py runs the numpy MF),
alternating with TensorFlow's `mf` workload (../shared/baselines/tf_ps/bench.py, run by
`--tf-python`, a TensorFlow CPU 2.21 interpreter in a virtualenv of its own): ours, TF,
ours, TF, ... `--runs` times each, so both see the same load (`--vary-seed`: our
run i trains with seed i, independent draws like TF's unseeded shuffles). The example gets TF's
workload (20 epochs, dim 32, batch 1024, Adagrad lr 0.03 on the PS, λ = λ_b = 0.05,
init N(0, 0.01²)) through whichever of its keyword arguments exist; the output lists
each setting as passed, left at an equal default, or not matched. Throughput on both
sides is TF's definition: examples of epochs 2..N over their wall time (evaluation
untimed), when the example reports `epoch_seconds`; otherwise its own `examples_per_sec`
(said in `ours_metric`). Our final test RMSE must be at most TF's in the same pair of
runs (`rmse_ok`).

**dlrm**: the DLRM-style example as a job (`examples.torch_recsys.dlrm:train`, 1 PS + 2
workers + coordinator) alternating with the same model trained in one plain-torch process
(its local reference function, the ceiling), same arguments; examples/s, test AUC and
job / local.

`--quick`: one run each with short training (a smoke check, not a figure). Prints one
JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import inspect
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DEFAULT_DATA = SHARED / "datasets" / "ml-100k"
DEFAULT_TF_BENCH = SHARED / "baselines" / "tf_ps" / "bench.py"
TF_VERSION = "2.21"
RUN_TIMEOUT_S = 1200  # one training run; a hang fails the bench instead of stalling it

MF_MODULE = "examples.torch_recsys.mf"
MF_TRAIN = "train"
DLRM_MODULE = "examples.torch_recsys.dlrm"
DLRM_TRAIN = "train"
# The single-process plain-torch reference of the same model, first name found.
DLRM_LOCAL_NAMES = ("train_local", "train_reference", "train_single_process")

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

# The DLRM example's own defaults are the workload; --quick shortens it with the first of
# these each that its signature has.
QUICK_DLRM: dict[str, tuple[Any, tuple[str, ...]]] = {
    "epochs": (1, ("epochs",)),
    "examples": (40_000, ("examples", "num_examples", "train_examples")),
}
# The job's train_loss reports time its steady state (startup and evaluations left out):
# this often, and windows before this fraction of the steps are warm-up.
DLRM_REPORT_EVERY = {False: 50, True: 25}
WARMUP_FRACTION = 0.1


def log(message: str) -> None:
    print(f"[torch_ps {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


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


def import_example(module: str) -> Any:
    """The example module, or an error naming the file that should hold it."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.is_file():
        raise SystemExit(f"torch_ps: {path} does not exist (the torch examples, issue 27)")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(module)


def need_tf(tf_python: str | None, tf_bench: Path) -> str:
    """Check the TensorFlow interpreter and the baseline script; return the interpreter."""
    how = (
        "create one outside the checkout: python3 -m venv ~/tfvenv && "
        f"~/tfvenv/bin/pip install tensorflow-cpu=={TF_VERSION}.0, then pass "
        "--tf-python ~/tfvenv/bin/python (or set TF_PYTHON); --no-tf skips the TF side"
    )
    if not tf_python:
        raise SystemExit(f"torch_ps: no TensorFlow interpreter given (--tf-python): {how}")
    if not os.access(tf_python, os.X_OK):
        raise SystemExit(f"torch_ps: --tf-python {tf_python} is not an executable: {how}")
    if not tf_bench.is_file():
        raise SystemExit(
            f"torch_ps: the TF baseline script {tf_bench} is missing: pass --tf-bench "
            "PATH to ../shared/baselines/tf_ps/bench.py"
        )
    probe = subprocess.run(
        [tf_python, "-c", "import tensorflow as tf; print(tf.__version__)"],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"torch_ps: {tf_python} cannot import tensorflow ({last}): {how}")
    version = probe.stdout.strip().splitlines()[-1]
    if not version.startswith(TF_VERSION):
        log(f"warning: {tf_python} has TensorFlow {version}, the baseline used {TF_VERSION}")
    return tf_python


# ---------------------------------------------------------------------------------------
# matching keyword arguments to an example's signature
# ---------------------------------------------------------------------------------------


def _adagrad_defaults() -> tuple[float, float]:
    from ps_runtime.server.optimizers import Adagrad

    return Adagrad.defaults["initial_accumulator"], Adagrad.defaults["epsilon"]


def match_settings(
    fn: Callable[..., Any],
    wanted: dict[str, tuple[Any, tuple[str, ...]]],
    fixed: dict[str, tuple[Callable[[str], bool], str]] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Keyword arguments for `fn` carrying `wanted`, and how each setting was matched;
    `fixed` checks the settings that `fn` does not take against its module's source."""
    params = inspect.signature(fn).parameters
    source = inspect.getsource(inspect.getmodule(fn) or fn)
    kwargs: dict[str, Any] = {}
    how: dict[str, str] = {}
    for setting, (value, names) in wanted.items():
        name = next((n for n in names if n in params), None)
        if name is None:
            check, said = (fixed or {}).get(setting, (None, ""))
            how[setting] = (
                f"{value!r}: {said}"
                if check is not None and check(source)
                else f"{value!r}: no such argument, NOT matched (the example's own rule)"
            )
            continue
        kwargs[name] = value
        how[setting] = f"{value!r} as {name}"
    return kwargs, how


def accepted(fn: Callable[..., Any], extra: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in extra.items() if k in params}


def cli_args(kwargs: dict[str, Any]) -> list[str]:
    """`--key value` pairs as ps_runtime.launch parses them after `--`."""
    out: list[str] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out += [f"--{key}", text]
    return out


# ---------------------------------------------------------------------------------------
# running one side
# ---------------------------------------------------------------------------------------


def run_process(cmd: Sequence[str], what: str, timeout: float = RUN_TIMEOUT_S) -> str:
    """Run `cmd` to the end (SIGTERM after `timeout` s); its stdout, or exit naming it."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # launch stops its processes on SIGTERM
        out, err = proc.communicate(timeout=30)
        raise SystemExit(f"torch_ps: {what} ran over {timeout:.0f} s:\n{err[-3000:]}") from None
    if proc.returncode != 0:
        raise SystemExit(f"torch_ps: {what} failed ({proc.returncode}):\n{err[-3000:]}")
    return out


def result_line(stdout: str, what: str) -> dict[str, Any]:
    """The `{"result": ...}` line a task prints (launch prefixes it with the task name)."""
    for line in reversed(stdout.splitlines()):
        payload = line.split("] ", 1)[-1]
        if payload.startswith('{"result"'):
            result: dict[str, Any] = json.loads(payload)["result"]
            return result
    raise SystemExit(f"torch_ps: no result line from {what}:\n{stdout[-3000:]}")


def run_job(
    entry: str, kwargs: dict[str, Any], ps: int, workers: int, timeout: float = RUN_TIMEOUT_S
) -> dict[str, Any]:
    """One job through `python -m ps_runtime.launch`; the coordinator's result."""
    cmd = [sys.executable, "-m", "ps_runtime.launch", "--ps", str(ps), "--workers", str(workers)]
    out = run_process([*cmd, entry, "--", *cli_args(kwargs)], f"the job {entry}", timeout)
    result = result_line(out, entry)
    result["_reports"] = reports(out)
    return result


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


def run_local(
    module: str, function: str, kwargs: dict[str, Any], timeout: float = RUN_TIMEOUT_S
) -> dict[str, Any]:
    """`module.function(**kwargs)` in a fresh interpreter of its own; its result."""
    code = (
        "import json, sys\n"
        f"from {module} import {function} as fn\n"
        "print(json.dumps({'result': fn(**json.loads(sys.argv[1]))}, default=str))\n"
    )
    cmd = [sys.executable, "-c", code, json.dumps(kwargs)]
    out = run_process(cmd, f"{module}.{function}", timeout)
    return result_line(out, f"{module}.{function}")


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


def run_tf_mf(tf_python: str, tf_bench: Path, data: Path, epochs: int) -> dict[str, Any]:
    # TF's defaults are the workload; epochs, dim, batch and lr are passed to say so.
    value = {k: v for k, (v, _) in TF_MF.items()}
    cmd = [
        tf_python,
        str(tf_bench),
        "mf",
        "--data",
        str(data),
        "--epochs",
        str(epochs),
        "--dim",
        str(value["dim"]),
        "--batch-size",
        str(value["batch_size"]),
        "--lr",
        str(value["lr"]),
        "--optimizer",
        str(value["optimizer"]),
    ]
    out = run_process(cmd, "TensorFlow's mf")
    result = json.loads(out.strip().splitlines()[-1])
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


def median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 4)


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
    pairs = []
    for i in range(args.runs):
        log(f"mf run {i + 1}/{args.runs}: ours (1 PS + {args.workers} workers)")
        if vary_seed:  # independent runs, as TF's unseeded shuffles make its own
            kwargs["seed"] = i
        ours = run_ours_mf(args.data, kwargs, args.ps, args.workers)
        log(f"  ours {ours['examples_per_sec']:,} examples/s, RMSE {ours['test_rmse']}")
        pair: dict[str, Any] = {"ours": ours, "load_avg": load_avg()}
        if tf_python:
            log(f"mf run {i + 1}/{args.runs}: TensorFlow")
            tf = run_tf_mf(tf_python, args.tf_bench, args.data, epochs)
            log(f"  TF {tf['examples_per_sec']:,} examples/s, RMSE {tf['test_rmse']}")
            pair["tf"] = tf
            pair["rmse_ok"] = ours["test_rmse"] <= tf["test_rmse"]
        pairs.append(pair)
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
        "ours_examples_per_sec_median": round(
            statistics.median(p["ours"]["examples_per_sec"] for p in pairs)
        ),
        "ours_test_rmse_median": median([p["ours"]["test_rmse"] for p in pairs]),
    }
    if tf_python:
        tf_rate = statistics.median(p["tf"]["examples_per_sec"] for p in pairs)
        out.update(
            tf_examples_per_sec_median=round(tf_rate),
            tf_test_rmse_median=median([p["tf"]["test_rmse"] for p in pairs]),
            ratio=round(out["ours_examples_per_sec_median"] / tf_rate, 3),
            rmse_ok_every_run=all(p["rmse_ok"] for p in pairs),
        )
        out["rmse_ok_medians"] = out["ours_test_rmse_median"] <= out["tf_test_rmse_median"]
    return out


def dlrm_local_name(module: Any) -> str:
    for name in DLRM_LOCAL_NAMES:
        if callable(getattr(module, name, None)):
            return name
    raise SystemExit(
        f"torch_ps: {module.__file__} has none of {', '.join(DLRM_LOCAL_NAMES)} (the "
        "single-process plain-torch reference the bench compares the job with)"
    )


def steady_rate(reports: list[dict[str, Any]], batch_size: int) -> dict[str, Any] | None:
    """Examples/s between the job's `train_loss` reports, leaving out the warm-up (the
    first WARMUP_FRACTION of the steps: workers import torch and build their data) and
    every window that holds an evaluation (an `epoch` report)."""
    losses = [r for r in reports if "train_loss" in r]
    evals = [r["step"] for r in reports if "epoch" in r]
    if len(losses) < 2:
        return None
    start = WARMUP_FRACTION * losses[-1]["step"]
    steps, seconds = 0, 0.0
    for a, b in itertools.pairwise(losses):
        if a["step"] < start or any(a["step"] < e <= b["step"] for e in evals):
            continue
        steps += b["step"] - a["step"]
        seconds += (
            dt.datetime.fromisoformat(b["time"]) - dt.datetime.fromisoformat(a["time"])
        ).total_seconds()
    if not seconds:
        return None
    return {"examples_per_sec": round(steps * batch_size / seconds), "steps": steps}


def dlrm_summary(result: dict[str, Any], batch_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {"examples_per_sec": round(float(result["examples_per_sec"]))}
    steady = steady_rate(result.get("_reports", []), batch_size)
    if steady:
        out["steady"] = steady
    for key in ("test_auc", "steps", "last_train_loss", "train_seconds"):
        value = result.get(key)
        if isinstance(value, float):
            value = round(value, 4)
        if value is not None:
            out[key] = value
    return out


def bench_dlrm(args: argparse.Namespace) -> dict[str, Any]:
    module = import_example(DLRM_MODULE)
    train = getattr(module, DLRM_TRAIN)
    local_name = dlrm_local_name(module)
    local = getattr(module, local_name)
    kwargs, how = match_settings(train, QUICK_DLRM) if args.quick else ({}, {})
    kwargs = accepted(local, kwargs)  # both train the same thing
    job_kwargs = {**kwargs, **accepted(train, {"report_every": DLRM_REPORT_EVERY[args.quick]})}
    params = inspect.signature(train).parameters
    batch_size = kwargs.get("batch_size", params["batch_size"].default)
    runs: list[dict[str, Any]] = []
    for i in range(args.runs):
        log(f"dlrm run {i + 1}/{args.runs}: job (1 PS + {args.workers} workers)")
        job_result = run_job(f"{DLRM_MODULE}:{DLRM_TRAIN}", job_kwargs, args.ps, args.workers)
        job = dlrm_summary(job_result, batch_size)
        log(f"  job {job}")
        log(f"dlrm run {i + 1}/{args.runs}: one process, plain torch ({local_name})")
        ref = dlrm_summary(run_local(DLRM_MODULE, local_name, kwargs), batch_size)
        log(f"  local {ref}")
        runs.append({"job": job, "local": ref, "load_avg": load_avg()})
    job_steady = [r["job"]["steady"]["examples_per_sec"] for r in runs if "steady" in r["job"]]
    job_own = statistics.median(r["job"]["examples_per_sec"] for r in runs)
    local_rate = statistics.median(r["local"]["examples_per_sec"] for r in runs)
    steady = len(job_steady) == len(runs)
    job_rate = statistics.median(job_steady) if steady else job_own
    defaults = {
        n: p.default
        for n, p in inspect.signature(local).parameters.items()
        if p.default is not inspect.Parameter.empty and n != "data"
    }
    out: dict[str, Any] = {
        "entrypoint": f"{DLRM_MODULE}:{DLRM_TRAIN}",
        "local_reference": f"{DLRM_MODULE}:{local_name}",
        "ps": args.ps,
        "workers": args.workers,
        "arguments": {**defaults, **kwargs},
        "job_metric": "steady state between train_loss reports (startup, evaluations out)"
        if steady
        else "the example's examples_per_sec (whole run)",
        "runs": runs,
        "job_examples_per_sec_median": round(job_rate),
        "job_examples_per_sec_whole_run_median": round(job_own),
        "local_examples_per_sec_median": round(local_rate),
        "ratio": round(job_rate / local_rate, 3),
    }
    if how:
        out["quick_settings"] = how
    for side in ("job", "local"):
        aucs = [r[side]["test_auc"] for r in runs if "test_auc" in r[side]]
        if aucs:
            out[f"{side}_test_auc_median"] = median(aucs)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ml-100k folder")
    parser.add_argument(
        "--tf-python",
        default=os.environ.get("TF_PYTHON"),
        help="TensorFlow CPU 2.21 interpreter (default $TF_PYTHON)",
    )
    parser.add_argument("--tf-bench", type=Path, default=DEFAULT_TF_BENCH)
    parser.add_argument("--no-tf", action="store_true", help="mf without the TensorFlow side")
    parser.add_argument("--runs", type=int, help="runs of each side (default 3; 1 with --quick)")
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
        args.runs = 1 if args.quick else 3
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
            tf_python = need_tf(args.tf_python, args.tf_bench)
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
