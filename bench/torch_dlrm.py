"""The DLRM-style torch example as a job beside the same model in one plain-torch process
(bench/torch_ps.py's **dlrm** comparison): examples/s, test AUC and job / local.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import itertools
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_args import accepted, import_example, match_settings
from runs import run_job, run_local
from tf_side import load_avg, log, median

DLRM_MODULE = "examples.torch_recsys.dlrm"
DLRM_TRAIN = "train"
# The single-process plain-torch reference of the same model, first name found.
DLRM_LOCAL_NAMES = ("train_local", "train_reference", "train_single_process")
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
