"""The AutoRec MovieLens example: learning, early stopping, launch and resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.stop_request import StopRequested
from ps_runtime.examples import movielens_autorec
from tests.ps_runtime.examples.test_movielens import _write_u_data
from tests.ps_runtime.launch.test_processes import ROOT, _env, _metrics

SMALL: dict[str, Any] = {
    "hidden": 32,
    "max_epochs": 40,
    "patience": 20,
    "eval_every": 10,
    "lr": 0.01,
}


def test_train_in_process_learns_the_synthetic_ratings() -> None:
    result = movielens_autorec.train(**SMALL)
    hist = result["test_rmse_history"]
    assert hist[-1] < hist[0]
    assert result["test_rmse"] < 0.9  # the ratings' standard deviation is about 1.1
    assert 0.0 <= result["blend_weight"] <= 1.0
    assert set(result["epochs_per_view"]) == {"item", "user"}
    assert result["epochs"] == max(result["epochs_per_view"].values())


def test_early_stopping_keeps_the_best_epoch_on_the_held_out_ratings() -> None:
    # A tiny λ overfits: the held-out RMSE turns up and the selection phase ends early.
    result = movielens_autorec.train(
        hidden=32, l2=0.01, user_view=False, max_epochs=200, patience=20, eval_every=5, lr=0.02
    )
    assert result["select_epochs"] < 200
    assert result["epochs"] == result["epochs_per_view"]["item"]
    assert result["select_epochs"] - result["epochs"] >= 20
    assert result["blend_weight"] == 0.0 and "test_rmse_user" not in result


def test_a_stop_resumes_where_it_was_and_ends_as_an_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = movielens_autorec.train(**SMALL)
    for stop_at in (13, 20, whole["select_epochs"] + 7):  # mid-phase, at an evaluation, phase 2
        calls = 0

        def stop_once(self: CheckpointManager, at: int = stop_at) -> bool:
            nonlocal calls
            calls += 1
            return calls == at

        directory = tmp_path / str(stop_at)
        monkeypatch.setattr(CheckpointManager, "stop_requested", stop_once)
        with pytest.raises(StopRequested) as stopped:
            movielens_autorec.train(**SMALL, checkpoint_dir=str(directory))
        assert stopped.value.step == stop_at
        monkeypatch.undo()
        resumed = movielens_autorec.train(**SMALL, checkpoint_dir=str(directory))
        assert resumed["resumed_from_step"] == stop_at
        assert resumed["epochs_per_view"] == whole["epochs_per_view"]
        assert resumed["blend_weight"] == whole["blend_weight"]
        assert resumed["test_rmse"] == pytest.approx(whole["test_rmse"], abs=1e-4)


@pytest.mark.slow
def test_launch_on_a_u_data_file_with_two_ps_and_two_workers(tmp_path: Path) -> None:
    baseline = _write_u_data(tmp_path / "u.data")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ps_runtime.launch",
            "--ps",
            "2",
            "--workers",
            "2",
            "ps_runtime.examples.movielens_autorec:train",
            "--",
            "--data",
            str(tmp_path / "u.data"),
            *[f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()],
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    rmse = [m["values"]["test_rmse"] for m in _metrics(lines) if "test_rmse" in m["values"]]
    assert len(rmse) >= 2 and rmse[-1] < rmse[0]
    final = [json.loads(line[line.find("{") :]) for line in lines if '{"result"' in line]
    assert final and final[0]["result"]["test_rmse"] < 0.9 * baseline
    assert final[0]["result"]["examples_per_sec"] > 0
