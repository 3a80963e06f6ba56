"""TensorFlow's side of a side-by-side comparison: its interpreter, its runs of the
baseline's script, and the alternation ours, TF, ours, TF, ... on the same machine.

The baseline (../shared/baselines/tf_ps/, described by tensorflow_ps.md beside it) is
called by path, never copied: `bench.py <workload> --option value ...`, run by a
TensorFlow CPU 2.21 interpreter in a virtualenv of its own, prints one JSON line on
stdout. Used by bench/embedding.py (`embed`), bench/movielens.py and bench/torch_ps.py
(`mf`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runs import REPO, RUN_TIMEOUT_S, bench_name, run_process

TF_VERSION = "2.21"
DEFAULT_TF_BENCH = REPO.parent / "shared" / "baselines" / "tf_ps" / "bench.py"
DEFAULT_RUNS = 5  # of each side

Side = Callable[[int], dict[str, Any]]  # run index -> that run's figures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--tf-python, --tf-bench and --no-tf, the same in every bench that compares."""
    parser.add_argument(
        "--tf-python",
        default=os.environ.get("TF_PYTHON"),
        help=f"TensorFlow CPU {TF_VERSION} interpreter in its own virtualenv (default $TF_PYTHON)",
    )
    parser.add_argument(
        "--tf-bench",
        type=Path,
        default=DEFAULT_TF_BENCH,
        help="the baseline's bench.py (default ../shared/baselines/tf_ps/bench.py)",
    )
    parser.add_argument("--no-tf", action="store_true", help="ours alone, no TensorFlow side")


def how_to_get_tf() -> str:
    return (
        "create one outside the checkout: python3 -m venv ~/tfvenv && "
        f"~/tfvenv/bin/pip install tensorflow-cpu=={TF_VERSION}.0, then pass "
        "--tf-python ~/tfvenv/bin/python (or set TF_PYTHON); --no-tf runs ours alone"
    )


def tf_env() -> dict[str, str]:
    """Our environment with TensorFlow's C++ log quieted (its logs go to stderr anyway)."""
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def need_tf(tf_python: str | None, tf_bench: Path) -> str:
    """Check the TensorFlow interpreter and the baseline script; return the interpreter."""
    name = bench_name()
    if not tf_python:
        raise SystemExit(
            f"{name}: no TensorFlow interpreter given (--tf-python): {how_to_get_tf()}"
        )
    if not os.access(tf_python, os.X_OK):
        raise SystemExit(f"{name}: --tf-python {tf_python} is not an executable: {how_to_get_tf()}")
    if not tf_bench.is_file():
        raise SystemExit(
            f"{name}: the TF baseline script {tf_bench} is missing (the baseline is the folder "
            "../shared/baselines/tf_ps/ beside the checkout, with tensorflow_ps.md): pass "
            "--tf-bench PATH to its bench.py, or --no-tf to run ours alone"
        )
    probe = subprocess.run(
        [tf_python, "-c", "import tensorflow as tf; print(tf.__version__)"],
        capture_output=True,
        text=True,
        env=dict(tf_env(), TF_CPP_MIN_LOG_LEVEL="3"),
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(
            f"{name}: {tf_python} cannot import tensorflow ({last}): {how_to_get_tf()}"
        )
    version = (probe.stdout.strip().splitlines() or ["?"])[-1]
    if not version.startswith(TF_VERSION):
        log(f"warning: {tf_python} has TensorFlow {version}, the baseline used {TF_VERSION}")
    return tf_python


def log(message: str) -> None:
    print(f"[{bench_name()} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def tf_command(
    tf_python: str, tf_bench: Path, workload: str, options: Mapping[str, Any]
) -> list[str]:
    """`bench.py <workload>` with each option as `--name value` (underscores as dashes)."""
    cmd = [tf_python, str(tf_bench), workload]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return cmd


def parse_tf_line(stdout: str, workload: str) -> dict[str, Any]:
    """The last JSON line of `workload` that TF's bench.py printed."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("workload") == workload:
            return result
    raise SystemExit(
        f"{bench_name()}: TensorFlow's {workload} printed no result line:\n{stdout[-3000:]}"
    )


def check_settings(result: Mapping[str, Any], options: Mapping[str, Any], workload: str) -> None:
    """Stop when TF reports having run other settings than we asked (those it reports)."""
    differ = {
        key: (value, result[key])
        for key, value in options.items()
        if key in result and not _same(value, result[key])
    }
    if differ:
        said = ", ".join(f"{k}: asked {a!r}, ran {b!r}" for k, (a, b) in differ.items())
        raise SystemExit(f"{bench_name()}: TensorFlow's {workload} ran other settings ({said})")


def _same(asked: Any, ran: Any) -> bool:
    if isinstance(asked, int | float) and isinstance(ran, int | float):
        return math.isclose(float(asked), float(ran), rel_tol=1e-9)
    return str(asked) == str(ran)


def run_tf(
    tf_python: str,
    tf_bench: Path,
    workload: str,
    options: Mapping[str, Any],
    timeout: float = RUN_TIMEOUT_S,
) -> dict[str, Any]:
    """One run of TF's `workload` with `options`: the JSON object it printed."""
    cmd = tf_command(tf_python, tf_bench, workload, options)
    out = run_process(cmd, f"TensorFlow's {workload}", timeout, env=tf_env())
    result = parse_tf_line(out, workload)
    check_settings(result, options, workload)
    return result


def alternate(
    runs: int,
    ours: Side,
    tf: Side | None,
    each: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """`runs` pairs, each ours then TF's (`tf` None: ours alone), so both sides see the
    machine's load of the same minutes; `each` is told every pair when it is done."""
    pairs = []
    for i in range(runs):
        pair: dict[str, Any] = {"run": i + 1, "ours": ours(i)}
        if tf is not None:
            pair["tf"] = tf(i)
        pair["load_avg"] = load_avg()
        if each is not None:
            each(pair)
        pairs.append(pair)
    return pairs


def median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 4)


def side_by_side(pairs: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """Both sides' `metric`: every run's figure and the medians (TF's when it ran)."""
    ours = [p["ours"][metric] for p in pairs]
    out: dict[str, Any] = {f"ours_{metric}_median": median(ours), f"ours_{metric}_runs": ours}
    if pairs and all("tf" in p for p in pairs):
        tf = [p["tf"][metric] for p in pairs]
        out[f"tf_{metric}_median"] = median(tf)
        out[f"tf_{metric}_runs"] = tf
    return out


def ratio(comparison: Mapping[str, Any], metric: str) -> float | None:
    """ours / TF of the medians of `metric`; None without a TF side."""
    tf = comparison.get(f"tf_{metric}_median")
    return round(comparison[f"ours_{metric}_median"] / tf, 3) if tf else None
