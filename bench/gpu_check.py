"""One prepared check of the PyTorch examples on a lent GPU machine (not CI; nothing in CI
has a GPU). Trains both examples as jobs (1 PS + 2 workers + coordinator, separate
processes) on CUDA and on the CPU, checks that they train, and prints one JSON object.

Here, once, where pip reaches PyPI:

    .venv/bin/python bench/gpu_check.py --prepare

saves the runtime's dependencies as wheels for the GPU machine's Python (3.12; nothing can
be fetched there) and a copy of ml-100k's u1 split into .gpu_check/ (git-ignored through
.git/info/exclude; never committed). Then on the GPU machine, with `.gpu_check` carried:

    python3 bench/gpu_check.py            # --device cuda; --budget-s 420

installs the runtime with the torch extra (`pip install -e ".[torch]"`, from the carried
wheels when present), then runs, each within what is left of `--budget-s`:
  * MF (examples.torch_recsys.mf:train) on ml-100k u1 with TF's `mf` workload (20
    epochs, dim 32, batch 1024, Adagrad lr 0.03, λ 0.05), on CUDA and on the CPU: the
    training loss falls and the final test RMSE is at most 0.925. Without ml-100k it
    trains on generated ratings of the same shape instead and says so (the 0.925 bound
    is then loose: the mean predictor's RMSE on those is printed beside it);
  * DLRM (examples.torch_recsys.dlrm:train), its own defaults, on CUDA and on the CPU:
    the loss falls and the test AUC is at least 0.80;
and prints examples/s of each beside the CPU run's. Exit 0 when every check holds.

A dry run here: `.venv/bin/python bench/gpu_check.py --device cpu --skip-install`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PREPARED = REPO / ".gpu_check"
WHEELS = PREPARED / "wheels"
SHARED_DATA = REPO.parent / "shared" / "datasets" / "ml-100k"
# Installed on the GPU machine's image already (KINDS.md): never downloaded for it.
ON_DEVICE = frozenset({"torch", "numpy"})
DEVICE_PYTHON = "3.12"  # the GPU machine's python3 (its image holds torch)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
MF_RMSE_MAX = 0.925
DLRM_AUC_MIN = 0.80
MIN_RUN_S = 20  # no run starts with less of --budget-s left
DEVICE_ARGS = ("device",)
LOSS_HISTORY_KEYS = ("train_loss_history", "loss_history", "train_losses", "losses")


def log(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# --prepare (here)
# ---------------------------------------------------------------------------------------


def exclude_from_git(entry: str) -> None:
    """Add `entry` to .git/info/exclude (local to this checkout) unless it is there."""
    exclude = REPO / ".git" / "info" / "exclude"
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if entry not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a") as f:
            f.write(entry + "\n")


def runtime_pins() -> list[str]:
    """`name==version` of every runtime dependency (pyproject.toml's, its torch extra's)
    as installed in this interpreter, less what the GPU machine has."""
    import importlib.metadata
    import re
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project.get("optional-dependencies", {}).get("torch", [])]
    pins = []
    for requirement in wanted:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        if name and name[0].lower() not in ON_DEVICE:
            pins.append(f"{name[0]}=={importlib.metadata.version(name[0])}")
    return pins


def prepare(data: Path) -> None:
    exclude_from_git("/.gpu_check/")
    WHEELS.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", DEVICE_PYTHON, "--implementation", "cp", *platforms]
    pins = runtime_pins()
    log(f"wheels for Python {DEVICE_PYTHON}: {' '.join(pins)}")
    subprocess.run([*cmd, "-d", str(WHEELS), *pins], check=True)
    if (data / "u1.base").is_file() and (data / "u1.test").is_file():
        target = PREPARED / "ml-100k"
        target.mkdir(exist_ok=True)
        for name in ("u1.base", "u1.test"):
            shutil.copyfile(data / name, target / name)
        log(f"copied {data}/u1.base and u1.test to {target}")
    else:
        log(f"{data} has no u1 split: the GPU machine will train MF on generated ratings")
    size = sum(p.stat().st_size for p in PREPARED.rglob("*") if p.is_file())
    log(f"{PREPARED} holds {size / 2**20:.1f} MiB: carry '.gpu_check' to the GPU machine")


# ---------------------------------------------------------------------------------------
# install and environment (there)
# ---------------------------------------------------------------------------------------


def install() -> dict[str, Any]:
    """`pip install -e ".[torch]"`, offline from the carried wheels when there are any."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--quiet"]
    if WHEELS.is_dir() and any(WHEELS.glob("*.whl")):
        cmd += ["--no-index", "--find-links", str(WHEELS)]
    cmd += ["-e", f"{REPO}[torch]"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    out: dict[str, Any] = {
        "command": " ".join(cmd),
        "ok": proc.returncode == 0,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if proc.returncode != 0:
        out["error"] = (proc.stderr or proc.stdout)[-1500:]
        log(f"install failed, going on with what is importable:\n{out['error']}")
    return out


def environment(device: str) -> dict[str, Any]:
    """Versions and the GPU as a fresh interpreter sees them; exits when unusable."""
    code = (
        "import json, sys, grpc, numpy, torch\n"
        "import ps_runtime.server.servicer\n"
        "cuda = torch.cuda.is_available()\n"
        "print(json.dumps({'python': sys.version.split()[0], 'torch': torch.__version__,"
        " 'grpcio': grpc.__version__, 'numpy': numpy.__version__, 'cuda': cuda,"
        " 'gpu': torch.cuda.get_device_name(0) if cuda else None,"
        " 'cpus': __import__('os').cpu_count()}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO
    )
    if proc.returncode != 0:
        raise SystemExit(
            "gpu_check: the runtime does not import here:\n"
            f"{proc.stderr[-2000:]}\nmissing packages travel as wheels: run "
            "`bench/gpu_check.py --prepare` where pip reaches PyPI and carry '.gpu_check'"
        )
    env: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if device == "cuda" and not env["cuda"]:
        raise SystemExit(f"gpu_check: torch sees no CUDA device ({env}); --device cpu runs dry")
    return env


# ---------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------


def find_data(given: Path | None) -> Path | None:
    candidates = [given] if given else [SHARED_DATA, PREPARED / "ml-100k"]
    for path in candidates:
        if path is not None and (path / "u1.base").is_file() and (path / "u1.test").is_file():
            return path
    return None


def generate_ratings(folder: Path, seed: int = 0) -> float:
    """ml-100k-shaped ratings (943 users, 1,682 items, 80,000 + 20,000, rank 4 plus
    noise, rounded to 1..5) as u1.base / u1.test in `folder`; the mean predictor's test
    RMSE."""
    import numpy as np

    rng = np.random.default_rng(seed)
    users, items, n, rank = 943, 1682, 100_000, 4
    p = rng.normal(0, 0.5, (users, rank))
    q = rng.normal(0, 0.5, (items, rank))
    bu, bi = rng.normal(0, 0.5, users), rng.normal(0, 0.6, items)
    pairs = rng.choice(users * items, size=n, replace=False)
    u, i = pairs // items, pairs % items
    raw = 3.5 + bu[u] + bi[i] + np.sum(p[u] * q[i], axis=1) + rng.normal(0, 0.5, n)
    r = np.clip(np.rint(raw), 1, 5).astype(int)
    folder.mkdir(parents=True, exist_ok=True)
    cut = 80_000
    for name, rows in (("u1.base", slice(0, cut)), ("u1.test", slice(cut, n))):
        lines = [
            f"{a + 1}\t{b + 1}\t{c}\t0" for a, b, c in zip(u[rows], i[rows], r[rows], strict=True)
        ]
        (folder / name).write_text("\n".join(lines) + "\n")
    mean = r[:cut].mean()
    return float(np.sqrt(np.mean((r[cut:] - mean) ** 2)))


# ---------------------------------------------------------------------------------------
# runs and checks
# ---------------------------------------------------------------------------------------


def loss_falls(result: dict[str, Any]) -> dict[str, Any]:
    """The first and last training loss the job reported (`train_loss` metric lines, or a
    history in its result) and whether it fell."""
    series = [r["train_loss"] for r in result.get("_reports", []) if "train_loss" in r]
    if len(series) < 2:
        series = next((result[k] for k in LOSS_HISTORY_KEYS if isinstance(result.get(k), list)), [])
    if len(series) < 2:
        return {"falls": None, "why": "the job reported fewer than two training losses"}
    first, last = float(series[0]), float(series[-1])
    return {"falls": last < first, "first": round(first, 4), "last": round(last, 4)}


class Runner:
    """Runs the examples as jobs within a time budget, recording each run or its failure."""

    def __init__(self, budget_s: float, started: float) -> None:
        self.deadline = started + budget_s

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def job(self, entry: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        import torch_ps

        if self.left() < MIN_RUN_S:
            return {"skipped": f"under {MIN_RUN_S} s of --budget-s left"}
        log(f"{entry} {kwargs}")
        started = time.perf_counter()
        try:
            result = torch_ps.run_job(entry, kwargs, 1, 2, timeout=self.left())
        except SystemExit as e:  # run_job exits with what went wrong
            return {"error": str(e.code)[-2000:], "seconds": round(time.perf_counter() - started)}
        result["wall_s"] = round(time.perf_counter() - started, 1)
        return result


def with_device(fn: Any, kwargs: dict[str, Any], device: str) -> dict[str, Any] | None:
    """`kwargs` plus the device for `fn`; None when `fn` takes no device argument (it then
    trains on the CPU, right for the CPU run only)."""
    name = next((n for n in DEVICE_ARGS if n in inspect.signature(fn).parameters), None)
    if name is None:
        return dict(kwargs) if device == "cpu" else None
    return {**kwargs, name: device}


def mf_checks(args: argparse.Namespace, runner: Runner, devices: list[str]) -> dict[str, Any]:
    import torch_ps

    out: dict[str, Any] = {}
    data = find_data(args.data)
    if data is None:
        data = Path(tempfile.mkdtemp(prefix="gpu-check-ratings-"))
        mean_rmse = generate_ratings(data)
        out["data"] = (
            f"GENERATED ratings in {data} (no ml-100k u1 split found: --data, "
            f"{SHARED_DATA} or {PREPARED / 'ml-100k'}); the mean predictor's test RMSE "
            f"there is {mean_rmse:.4f}, so RMSE <= {MF_RMSE_MAX} is a weaker check"
        )
        log(out["data"])
    else:
        out["data"] = f"ml-100k u1 ({data})"
    train = getattr(torch_ps.import_example(torch_ps.MF_MODULE), torch_ps.MF_TRAIN)
    kwargs, how = torch_ps.match_settings(train, torch_ps.TF_MF, torch_ps.MF_FIXED)
    # One train_loss report per epoch of ml-100k u1 (79 steps of 1024), for "loss falls".
    kwargs.update(torch_ps.accepted(train, {"report_every": 79}))
    kwargs.update(data=str(data / "u1.base"), test=str(data / "u1.test"))
    out["settings"] = how
    entry = f"{torch_ps.MF_MODULE}:{torch_ps.MF_TRAIN}"
    for device in devices:
        kw = with_device(train, kwargs, device)
        result = (
            runner.job(entry, kw)
            if kw is not None
            else {"skipped": f"{entry} takes no device argument ({DEVICE_ARGS}): not run"}
        )
        run: dict[str, Any] = {k: result[k] for k in ("skipped", "error", "wall_s") if k in result}
        if "test_rmse" in result:
            rate, run["metric"] = torch_ps.mf_throughput(result)
            run["examples_per_sec"] = round(rate)
            run["test_rmse"] = round(float(result["test_rmse"]), 4)
            run["train_loss"] = loss_falls(result)
            run["ok"] = run["test_rmse"] <= MF_RMSE_MAX and run["train_loss"]["falls"] is True
        out[device] = run
    return out


def dlrm_checks(runner: Runner, devices: list[str]) -> dict[str, Any]:
    import torch_ps

    out: dict[str, Any] = {"arguments": "the example's defaults"}
    train = getattr(torch_ps.import_example(torch_ps.DLRM_MODULE), torch_ps.DLRM_TRAIN)
    entry = f"{torch_ps.DLRM_MODULE}:{torch_ps.DLRM_TRAIN}"
    for device in devices:
        kw = with_device(train, {}, device)
        result = (
            runner.job(entry, kw)
            if kw is not None
            else {"skipped": f"{entry} takes no device argument ({DEVICE_ARGS}): not run"}
        )
        run: dict[str, Any] = {k: result[k] for k in ("skipped", "error", "wall_s") if k in result}
        if "test_auc" in result:
            # The steady state (startup and evaluations left out) when the reports allow.
            batch = inspect.signature(train).parameters["batch_size"].default
            steady = torch_ps.steady_rate(result["_reports"], batch)
            run["examples_per_sec"] = (
                steady["examples_per_sec"] if steady else round(float(result["examples_per_sec"]))
            )
            run["metric"] = "steady state" if steady else "the example's (whole run)"
            run["whole_run_examples_per_sec"] = round(float(result["examples_per_sec"]))
            run["test_auc"] = round(float(result["test_auc"]), 4)
            run["train_loss"] = loss_falls(result)
            run["ok"] = run["test_auc"] >= DLRM_AUC_MIN and run["train_loss"]["falls"] is True
        out[device] = run
    return out


def run_checks(args: argparse.Namespace, started: float) -> dict[str, Any]:
    """Both examples on `args.device` first, then on the CPU for comparison."""
    devices = [args.device] if args.device == "cpu" else [args.device, "cpu"]
    runner = Runner(args.budget_s, started)
    out: dict[str, Any] = {}
    for name, checks in (
        ("mf", lambda: mf_checks(args, runner, devices)),
        ("dlrm", lambda: dlrm_checks(runner, devices)),
    ):
        try:
            out[name] = checks()
        except SystemExit as e:  # an example missing or broken: say so, check the other
            out[name] = {"error": str(e.code)}
            continue
        section = out[name]
        if len(devices) == 2 and "examples_per_sec" in section[devices[0]]:
            cpu = section["cpu"].get("examples_per_sec")
            if cpu:
                section[f"{devices[0]}_vs_cpu"] = round(
                    section[devices[0]]["examples_per_sec"] / cpu, 3
                )
    # The checks are the accelerator's; the CPU run is there for its examples/s.
    out["ok"] = all(out[name].get(args.device, {}).get("ok") is True for name in ("mf", "dlrm"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prepare", action="store_true", help="here: wheels and data")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--data", type=Path, help="ml-100k folder (default: found or generated)")
    parser.add_argument("--skip-install", action="store_true")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting runs after")
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(args.data or SHARED_DATA)
        return 0
    started = time.perf_counter()
    report: dict[str, Any] = {
        "check": "gpu_check",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": args.device,
    }
    report["install"] = {"skipped": True} if args.skip_install else install()
    report["environment"] = environment(args.device)
    report.update(run_checks(args, started))
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report), flush=True)
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
