"""bench/search.py --quick: the grid and ASHA driven by the searchers, end to end on tiny
generated ratings (nothing from ../shared), and the JSON the README's figures come from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "search.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _reached(trial: dict[str, Any]) -> int:
    return max(int(budget) for budget in trial["results"])


def test_quick_run_prints_both_methods_and_the_comparison() -> None:
    done = _run("--quick", "--space", "both")
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    settings = out["settings"]
    trials, budget = settings["trials"], settings["max_budget"]
    assert (trials, budget) == (8, 3)

    grid = out["grid"]
    assert grid["trials"] == grid["runs"] == trials
    assert grid["trial_epochs"] == trials * budget
    assert grid["best"]["epochs"] == budget
    assert grid["best"]["test_rmse"] == min(
        t["results"][str(budget)] for t in grid["trial_results"]
    )

    grid_rmse = {
        json.dumps(t["params"], sort_keys=True): t["results"] for t in grid["trial_results"]
    }
    for space in ("continuous", "discrete"):
        asha = out["asha"][space]
        assert asha["rungs"] == [1, 3]
        assert asha["trials"] == trials
        assert 1 <= asha["reached_max_budget"] < trials  # some trials stopped early
        # Each trial trained to the highest rung it reached, no epoch twice (resumed).
        assert asha["trial_epochs"] == sum(_reached(t) for t in asha["trial_results"])
        assert asha["runs"] == sum(len(t["results"]) for t in asha["trial_results"])
        best = asha["best"]
        assert best["test_rmse"] == min(
            v for t in asha["trial_results"] for v in t["results"].values()
        )
        c = out["comparison"][space]
        assert c["rmse_gap"] == round(best["test_rmse"] - grid["best"]["test_rmse"], 5)
        assert c["epochs_ratio"] == round(asha["trial_epochs"] / grid["trial_epochs"], 4)
        assert c["gap_ok"] == (best["test_rmse"] - grid["best"]["test_rmse"] <= 0.003)
        assert c["ratio_ok"] == (c["epochs_ratio"] <= 0.40)
        assert c["ok"] == (c["gap_ok"] and c["ratio_ok"])

    # discrete: ASHA's trials are the grid's points, and a trial resumed up to the full
    # budget ends where the grid's uninterrupted run of the same point ended.
    discrete = out["asha"]["discrete"]["trial_results"]
    assert sorted(json.dumps(t["params"], sort_keys=True) for t in discrete) == sorted(grid_rmse)
    for t in discrete:
        if str(budget) in t["results"]:
            key = json.dumps(t["params"], sort_keys=True)
            assert abs(t["results"][str(budget)] - grid_rmse[key][str(budget)]) < 1e-4
    assert out["headline"] == "continuous"
    assert out["ok"] == out["comparison"]["continuous"]["ok"]


def test_missing_data_fails_with_what_to_pass(tmp_path: Path) -> None:
    done = _run("--data-dir", str(tmp_path))
    assert done.returncode != 0
    assert "u1.base" in done.stderr and "--data-dir" in done.stderr
    assert done.stdout == ""
