"""Hyperparameter search on ml-100k u1: ASHA's best against a grid's, and what each costs.

The trials are the MF example (`ps_runtime.examples.movielens:train`, in-process: one PS
and one worker on a LocalCluster, real gRPC) on u1.base/u1.test, searching the learning
rate, the L2 weight and the dimension. The decisions are the platform's own: both
methods are driven by `trainhub.experiments.searchers.next_actions` on a `SearchSpec`
built from the same `params`, and a trial runs as the platform runs it: toward rung k
with `epochs = rungs[k]`, its last reported `test_rmse` being its result there; a
promoted trial runs again with the larger budget and resumes from its own checkpoint
directory, so it trains only `rungs[k+1] - rungs[k]` new epochs (checked on every run
against the example's `resumed_from_step` and the epochs it reported).

- **grid**: 3 values of each parameter (27 trials), each trained to `--max-budget`
  epochs (15, the example's default): 27 x 15 = 405 trial-epochs.
- **asha**: 27 trials, reduction factor 3, rungs from `--min-budget` (3): 3, 9, 15
  epochs. `max_concurrent` slots
  (`--max-concurrent`, the platform's default 2) are simulated one run at a time: the
  running trial started or promoted first completes first, then the searcher decides
  again.
- Spaces (`--space`): **continuous** (the headline, fixed before any run): `lr`
  log-uniform 0.01..0.2, `l2` log-uniform 0.01..0.3, `dim` one of 8, 16, 32; the grid
  takes `grid_points` = 3 values of each range (geometric: lr 0.01, 0.0447, 0.2; l2
  0.01, 0.0548, 0.3), ASHA samples the ranges. **discrete**: the same 27 grid values as
  categorical parameters, so ASHA's 27 trials are the grid's 27 points in a seeded order
  and only successive halving's early stopping separates the two. The grid runs once and
  serves both.

The best result is `searchers.best` (the experiment page's): the lowest `test_rmse` any
trial reported at any rung. Trial-epochs count the epochs trained. One JSON object on
stdout: per method the best trial (params, test RMSE, budget), trial-epochs, runs, wall
seconds and every trial's results; per space `rmse_gap` (ASHA best - grid best),
`epochs_ratio` (ASHA / grid trial-epochs) and the goals (gap <= 0.003, ratio <= 0.40);
`grid.early_ranking`: how well each lower rung's ranking of the grid's configurations
predicts the final one (what limits ASHA).
Progress on stderr. `--seed` seeds both the searcher and the training (initial rows,
shuffles), the same for every trial.

    .venv/bin/python bench/search.py    # ml-100k u1, ~13 min on 2 cores; --quick: smoke
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc loads: no GOAWAY notices
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "platform"))

from trainhub.experiments import searchers  # noqa: E402
from trainhub.experiments.searchers import DONE, RUNNING, WAITING, Promote, Start, TrialView  # noqa: E402
from trainhub.experiments.searchspec import MAX_TRIALS, SearchSpec  # noqa: E402

SHARED = REPO.parent / "shared"
GOAL_RMSE_GAP = 0.003
GOAL_EPOCHS_RATIO = 0.40
BATCH_SIZE = 512  # the example's default, passed so that steps per epoch are known
RANGES = {"lr": (0.01, 0.2), "l2": (0.01, 0.3)}
DIMS = [8, 16, 32]


def space_params(space: str, points: int, dims: list[int]) -> dict[str, Any]:
    """The `params` of both specs: ranges (continuous) or the grid's values (discrete)."""
    continuous: dict[str, Any] = {
        name: {"type": "log_uniform", "low": low, "high": high}
        for name, (low, high) in RANGES.items()
    }
    continuous["dim"] = {"type": "categorical", "values": dims}
    if space == "continuous":
        return continuous
    axes = searchers.grid(_spec("grid", continuous, points, 9, MAX_TRIALS, 0, 1))
    return {
        name: {"type": "categorical", "values": sorted({p[name] for p in axes})}
        for name in continuous
    }


def _spec(
    method: str,
    params: dict[str, Any],
    points: int,
    max_budget: int,
    trials: int,
    seed: int,
    concurrent: int,
    min_budget: int = 1,
) -> SearchSpec:
    return SearchSpec.from_dict(
        {
            "method": method,
            "metric": "test_rmse",
            "goal": "minimize",
            "max_trials": trials,
            "max_concurrent": concurrent,
            "budget": "epochs",
            "budget_arg": "epochs",
            "max_budget": max_budget,
            "min_budget": min_budget,
            "reduction_factor": 3,
            "grid_points": points,
            "seed": seed,
            "params": params,
        }
    )


@dataclass
class Trainer:
    """Runs one trial toward a budget, resuming from the trial's checkpoint directory."""

    data: Path | None  # None: --quick's generated files in `root`
    root: Path
    seed: int
    verbose: bool
    files: tuple[str, str] = ("", "")
    # Each trial's test RMSE after every epoch it trained, by (tag, trial number).
    histories: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.data is None:
            self.files = _tiny_ratings(self.root, self.seed)
        else:
            self.files = (str(self.data / "u1.base"), str(self.data / "u1.test"))

    def __call__(
        self, tag: str, number: int, params: dict[str, Any], epochs: int, done: int
    ) -> float:
        """Train trial `number` of method `tag` to `epochs` (it has `done` already); its
        last test RMSE. Fails when the example did not resume where the trial stopped."""
        from ps_runtime.examples.movielens import train

        checkpoints = self.root / tag / f"trial-{number:03d}"
        checkpoints.mkdir(parents=True, exist_ok=True)
        sink: Any = sys.stderr if self.verbose else io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(sink):  # report() lines and the resume notice
            result = train(
                data=self.files[0],
                test=self.files[1],
                epochs=epochs,
                dim=int(params["dim"]),
                lr=float(params["lr"]),
                l2=float(params["l2"]),
                batch_size=BATCH_SIZE,
                seed=self.seed,
                checkpoint_dir=str(checkpoints),
            )
        seconds = time.perf_counter() - start
        steps_per_epoch = result["examples_per_epoch"] // BATCH_SIZE
        trained = len(result["test_rmse_history"])
        if result["resumed_from_step"] != done * steps_per_epoch or trained != epochs - done:
            raise SystemExit(
                f"{tag} trial {number}: expected to resume at epoch {done} and train "
                f"{epochs - done} epochs; resumed at step {result['resumed_from_step']} "
                f"({steps_per_epoch} steps per epoch) and trained {trained}"
            )
        self.histories.setdefault((tag, number), []).extend(result["test_rmse_history"])
        rmse = float(result["test_rmse"])
        print(
            f"{tag} trial {number:2d} epochs {done}->{epochs} test_rmse {rmse:.4f} "
            f"({seconds:.1f}s) {_short(params)}",
            file=sys.stderr,
            flush=True,
        )
        return rmse


def _short(params: dict[str, Any]) -> str:
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )


def _tiny_ratings(root: Path, seed: int) -> tuple[str, str]:
    """--quick: a small seeded low-rank split in ml-100k's format (nothing from ../shared)."""
    from ps_runtime.examples.movielens import synthetic_ratings

    r = synthetic_ratings(seed, num_users=60, num_items=40, num_ratings=1500, rank=2)
    rows = np.column_stack([r.users, r.items, r.ratings.astype(np.int64)])
    order = np.random.default_rng(seed).permutation(len(rows))
    cut = round(0.8 * len(rows))
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, part in (("tiny.base", order[:cut]), ("tiny.test", order[cut:])):
        path = root / name
        np.savetxt(path, rows[part], fmt="%d", delimiter="\t")
        paths.append(str(path))
    return paths[0], paths[1]


def run_search(
    spec: SearchSpec, tag: str, train: Callable[[str, int, dict[str, Any], int, int], float]
) -> dict[str, Any]:
    """Drive `spec` with `next_actions` until `finished`, one run at a time."""
    rungs = spec.rungs()
    top = len(rungs) - 1
    views: dict[int, TrialView] = {}
    params: dict[int, dict[str, Any]] = {}
    queue: list[tuple[int, int]] = []  # running (trial, rung), first started first
    epochs = runs = 0
    start = time.perf_counter()
    while True:
        for action in searchers.next_actions(spec, list(views.values())):
            if isinstance(action, Start):
                params[action.number] = action.params
                views[action.number] = TrialView(action.number, RUNNING, 0)
                queue.append((action.number, 0))
            elif isinstance(action, Promote):
                old = views[action.number]
                views[action.number] = TrialView(old.number, RUNNING, action.rung, old.results)
                queue.append((action.number, action.rung))
        if not queue:
            break
        number, rung = queue.pop(0)
        done = rungs[rung - 1] if rung else 0
        rmse = train(tag, number, params[number], rungs[rung], done)
        epochs += rungs[rung] - done
        runs += 1
        old = views[number]
        status = DONE if rung == top else WAITING
        views[number] = TrialView(number, status, rung, {**old.results, rung: rmse})
    assert searchers.finished(spec, list(views.values()))
    found = searchers.best(spec, list(views.values()))
    assert found is not None
    number, rung, value = found
    trials = [
        {
            "trial": t.number,
            "params": params[t.number],
            "results": {str(rungs[k]): round(v, 5) for k, v in sorted(t.results.items())},
        }
        for t in sorted(views.values(), key=lambda t: t.number)
    ]
    top_results = [(t.results[top], t.number) for t in views.values() if top in t.results]
    return {
        "best": {
            "trial": number,
            "params": params[number],
            "test_rmse": round(value, 5),
            "epochs": rungs[rung],
        },
        "best_at_max_budget": round(min(top_results)[0], 5) if top_results else None,
        "trials": len(views),
        "reached_max_budget": len(top_results),
        "trial_epochs": epochs,
        "runs": runs,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "rungs": list(rungs),
        "trial_results": trials,
    }


def _ranks(values: list[float]) -> np.ndarray:
    return np.argsort(np.argsort(np.asarray(values))).astype(float)


def early_ranking(histories: list[list[float]], budgets: list[int]) -> dict[str, Any]:
    """How well each lower rung's ranking of the grid's configurations predicts the full
    budget's: Spearman's rho between the RMSE after `b` epochs and after the last, and
    where the configuration best at the end ranks after `b` epochs (1: first). ASHA
    promotes on the lower rungs' rankings, so a low rho is what limits it."""
    final = [h[-1] for h in histories]
    best = int(np.argmin(final))
    out: dict[str, Any] = {}
    for b in budgets:
        early = [h[b - 1] for h in histories]
        rho = float(np.corrcoef(_ranks(early), _ranks(final))[0, 1])
        out[str(b)] = {
            "spearman_rho_with_final": round(rho, 3),
            "final_best_ranks": int(_ranks(early)[best]) + 1,
        }
    return out


def compare(grid: dict[str, Any], asha: dict[str, Any]) -> dict[str, Any]:
    gap = asha["best"]["test_rmse"] - grid["best"]["test_rmse"]
    ratio = asha["trial_epochs"] / grid["trial_epochs"]
    return {
        "rmse_gap": round(gap, 5),
        "epochs_ratio": round(ratio, 4),
        "wall_ratio": round(asha["wall_seconds"] / grid["wall_seconds"], 3),
        "same_config": asha["best"]["params"] == grid["best"]["params"],
        "gap_ok": gap <= GOAL_RMSE_GAP,
        "ratio_ok": ratio <= GOAL_EPOCHS_RATIO,
        "ok": gap <= GOAL_RMSE_GAP and ratio <= GOAL_EPOCHS_RATIO,
    }


def _early_budgets(budget: int, min_budget: int) -> list[int]:
    """Where to compare early rankings with the final one: after 1 epoch and at each of
    ASHA's rungs below the full budget."""
    rungs, b = {1}, min_budget
    while b < budget:
        rungs.add(b)
        b *= 3
    return sorted(r for r in rungs if r < budget)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=SHARED / "datasets" / "ml-100k")
    parser.add_argument(
        "--max-budget", type=int, default=15, help="a trial's full epochs (the example's default)"
    )
    parser.add_argument(
        "--min-budget", type=int, default=3, help="ASHA's first rung (its grace period)"
    )
    parser.add_argument("--seed", type=int, default=0, help="searcher and training seed")
    parser.add_argument("--max-concurrent", type=int, default=2, help="ASHA's slots")
    parser.add_argument("--space", choices=("continuous", "discrete", "both"), default="both")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: tiny synthetic ratings, 8 trials"
    )
    parser.add_argument("--verbose", action="store_true", help="the trials' reports to stderr")
    args = parser.parse_args()
    if not args.verbose:  # every promotion resumes: its notice says nothing here
        logging.getLogger("ps_runtime.coordinator.checkpoint_manager").setLevel(logging.ERROR)
    # --quick: 2 values of each parameter (8 trials), rungs 1, 3.
    points, dims, budget = (2, [4, 8], 3) if args.quick else (3, DIMS, args.max_budget)
    min_budget = 1 if args.quick else args.min_budget
    trials = points * points * len(dims)
    data: Path | None = None
    if not args.quick:
        data = args.data_dir.resolve()
        missing = [n for n in ("u1.base", "u1.test") if not (data / n).is_file()]
        if missing:
            raise SystemExit(
                f"{', '.join(missing)} not found in {data}: pass --data-dir DIR (ml-100k's "
                "u1 split, from https://grouplens.org/datasets/movielens/100k/), or --quick"
            )
    spaces = ["continuous", "discrete"] if args.space == "both" else [args.space]
    with tempfile.TemporaryDirectory(prefix="trainhub-search-") as tmp:
        train = Trainer(data, Path(tmp), args.seed, args.verbose)
        base = space_params("continuous", points, dims)
        grid_spec = _spec("grid", base, points, budget, trials, args.seed, args.max_concurrent)
        grid = run_search(grid_spec, "grid", train)
        grid["early_ranking"] = early_ranking(
            [train.histories[("grid", n)] for n in range(1, trials + 1)],
            _early_budgets(budget, min_budget),
        )
        asha, comparison = {}, {}
        for space in spaces:
            spec = _spec(
                "asha",
                space_params(space, points, dims),
                points,
                budget,
                trials,
                args.seed,
                args.max_concurrent,
                min_budget,
            )
            asha[space] = run_search(spec, f"asha-{space}", train)
            comparison[space] = compare(grid, asha[space])
    headline = "continuous" if "continuous" in spaces else spaces[0]
    out = {
        "bench": "search",
        "data": "synthetic (--quick)" if data is None else f"{data} u1.base/u1.test",
        "settings": {
            "trials": trials,
            "max_budget": budget,
            "min_budget": min_budget,
            "reduction_factor": 3,
            "max_concurrent": args.max_concurrent,
            "seed": args.seed,
            "batch_size": BATCH_SIZE,
            "params": base,
            "grid_values": {
                name: sorted({p[name] for p in searchers.grid(grid_spec)}) for name in base
            },
        },
        "goals": {"rmse_gap_max": GOAL_RMSE_GAP, "epochs_ratio_max": GOAL_EPOCHS_RATIO},
        "grid": grid,
        "asha": asha,
        "comparison": comparison,
        "headline": headline,
        "ok": comparison[headline]["ok"],
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
