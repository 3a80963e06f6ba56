"""The DLRM example: Criteo's format, the generated clicks' structure, accuracy on an
in-process cluster, and checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from examples.torch_recsys import dlrm
from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.stop_request import StopRequested


def _criteo_lines(count: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(count):
        counts = [str(c) if rng.random() > 0.1 else "" for c in rng.poisson(3, 13)]
        cats = [f"{v:08x}" if rng.random() > 0.1 else "" for v in rng.integers(0, 40, 26) * 977]
        lines.append("\t".join([str(int(rng.random() < 0.3)), *counts, *cats]))
    return "\n".join(lines) + "\n"


def test_reads_criteo_lines(tmp_path: Path) -> None:
    path = tmp_path / "day_0.txt"
    first = ["1", "", "-1", "3", *["0"] * 10, "68fd1e64", *[""] * 24, "68fd1e64"]
    second = ["0", *["1"] * 13, "68fd1e64", "0000abcd", *[""] * 24]
    path.write_text("\t".join(first) + "\n" + "\t".join(second) + "\n" + _criteo_lines(3))
    clicks = dlrm.read_criteo(str(path))
    assert clicks.dense.shape == (5, 13) and clicks.sparse.shape == (5, 26)
    assert clicks.labels.tolist()[:2] == [1.0, 0.0] and clicks.sparse.dtype == np.int64
    np.testing.assert_allclose(clicks.dense[0, :3], [0.0, 0.0, np.log(4.0)])  # empty, -1, 3
    a, b = clicks.sparse[0], clicks.sparse[1]
    assert a[0] == b[0]  # the same value in the same field: one id
    assert a[0] != a[25]  # the same value in two fields: two ids
    assert a[2] == b[2] and a[1] != b[1]  # an empty field is one more value of that field
    path.write_text("1\t2\t3\n")
    with pytest.raises(ValueError, match=r"day_0.txt:1: 3 columns"):
        dlrm.read_criteo(str(path))


def test_generated_clicks_are_seeded() -> None:
    a, b = dlrm.generate_clicks(2000, seed=1), dlrm.generate_clicks(2000, seed=1)
    np.testing.assert_array_equal(a.sparse, b.sparse)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.labels, dlrm.generate_clicks(2000, seed=2).labels)
    assert a.dense.shape == (2000, 13) and a.sparse.shape == (2000, 8)
    assert 0.1 < a.labels.mean() < 0.5


def test_logistic_regression_cannot_use_the_interactions() -> None:
    assert dlrm.logistic_regression_auc() <= 0.76


def test_dlrm_on_the_parameter_servers_learns_the_interactions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = dlrm.train(report_every=200)
    assert result["test_auc"] >= 0.80
    assert result["steps"] == 3 * (100_000 // 256) and len(result["auc_history"]) == 3
    assert result["auc_history"][0] < result["test_auc"]
    out = capsys.readouterr().out
    assert '"train_loss"' in out and '"test_auc"' in out


def test_the_single_process_reference_learns_them_too() -> None:
    assert dlrm.train_local()["test_auc"] >= 0.80


def test_trains_on_a_criteo_file(tmp_path: Path) -> None:
    path = tmp_path / "sample.txt"
    path.write_text(_criteo_lines(1000))
    result = dlrm.train(data=str(path), epochs=1, batch_size=100, report_every=3)
    assert result["steps"] == 900 // 100  # the 90 % training split
    assert 0.0 <= result["test_auc"] <= 1.0


def test_a_stop_mid_run_saves_and_the_rerun_resumes_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All state is on the PS: the table, its Adagrad slots and the dense variables come
    back from the checkpoint, and training continues at the saved step."""
    calls = 0

    def after_step_5(self: CheckpointManager) -> bool:
        nonlocal calls
        calls += 1
        return calls == 5

    small: dict[str, Any] = {
        "examples": 4000,
        "epochs": 2,
        "batch_size": 200,
        "checkpoint_dir": str(tmp_path),
    }
    monkeypatch.setattr(CheckpointManager, "stop_requested", after_step_5)
    with pytest.raises(StopRequested) as stopped:
        dlrm.train(**small)
    assert stopped.value.step == 5
    monkeypatch.undo()

    result = dlrm.train(**small)
    assert result["resumed_from_step"] == 5 and result["steps"] == 2 * 20
    assert len(result["auc_history"]) == 2
