"""The MovieLens example: data formats, hand-derived gradients, and accuracy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ps_runtime.coordinator.checkpoint_manager import CheckpointManager
from ps_runtime.coordinator.stop_request import StopRequested
from ps_runtime.examples import movielens
from ps_runtime.models.mf import loss_and_gradients


def test_reads_u_data_and_ratings_csv(tmp_path: Path) -> None:
    (tmp_path / "u.data").write_text("1\t10\t4\t881250949\n2\t20\t3\t881250950\n")
    (tmp_path / "ratings.csv").write_text(
        "userId,movieId,rating,timestamp\n1,10,4.5,1\n3,30,2.0,2\n"
    )
    u = movielens.read_ratings(str(tmp_path / "u.data"))
    c = movielens.read_ratings(str(tmp_path / "ratings.csv"))
    assert u.users.tolist() == [1, 2] and u.items.tolist() == [10, 20]
    assert c.ratings.tolist() == [4.5, 2.0] and c.users.dtype == np.int64
    with pytest.raises(FileNotFoundError, match="synthetic"):
        movielens.read_ratings(str(tmp_path / "missing"))


def test_split_is_seeded_and_complete() -> None:
    a = movielens.load_dataset(None, None, seed=1)
    b = movielens.load_dataset(None, None, seed=1)
    assert len(a.train) + len(a.test) == 40_000 and len(a.train) == 32_000
    np.testing.assert_array_equal(a.test.users, b.test.users)
    np.testing.assert_array_equal(a.epoch_order(3), b.epoch_order(3))


def test_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(0)
    u, v = rng.normal(0, 0.3, (5, 4)), rng.normal(0, 0.3, (5, 4))
    r = rng.uniform(1, 5, 5)
    _, gu, gv = loss_and_gradients(u, v, r, 3.5, 0.05, 0.07)
    eps = 1e-6
    for arr, grad in ((u, gu), (v, gv)):
        for idx in [(0, 0), (2, 3), (4, 1)]:
            old = arr[idx]
            arr[idx] = old + eps
            plus = loss_and_gradients(u, v, r, 3.5, 0.05, 0.07)[0]
            arr[idx] = old - eps
            minus = loss_and_gradients(u, v, r, 3.5, 0.05, 0.07)[0]
            arr[idx] = old
            assert grad[idx] == pytest.approx((plus - minus) / (2 * eps), rel=1e-4)


def test_train_in_process_on_synthetic_data(capsys: pytest.CaptureFixture[str]) -> None:
    result = movielens.train(epochs=2, dim=8)
    hist = result["test_rmse_history"]
    assert len(hist) == 2 and hist[1] < hist[0]
    assert '"test_rmse"' in capsys.readouterr().out


def _write_u_data(path: Path, seed: int = 7, users: int = 300, items: int = 500) -> float:
    """20,000 ratings in ml-100k's `u.data` format (user, item, rating, timestamp; tabs),
    from hidden rank-3 tastes plus biases and noise; returns the ratings' standard deviation
    (the RMSE of always predicting the mean)."""
    rng = np.random.default_rng(seed)
    n, rank = 20_000, 3
    p, q = rng.normal(0, 0.7, (users, rank)), rng.normal(0, 0.7, (items, rank))
    bu, bi = rng.normal(0, 0.5, users), rng.normal(0, 0.5, items)
    u, i = rng.integers(0, users, n), rng.integers(0, items, n)
    raw = 3.6 + bu[u] + bi[i] + np.sum(p[u] * q[i], axis=1) + rng.normal(0, 0.3, n)
    ratings = np.clip(np.rint(raw), 1, 5).astype(int)
    stamps = 874_724_710 + np.sort(rng.integers(0, 10**7, n))
    path.write_text(
        "".join(
            f"{a}\t{b}\t{c}\t{d}\n"
            for a, b, c, d in zip(u + 1, i + 1, ratings, stamps, strict=True)
        )
    )
    return float(ratings.std())


def test_five_epochs_on_a_u_data_file_learn_the_ratings(tmp_path: Path) -> None:
    baseline = _write_u_data(tmp_path / "u.data")
    result = movielens.train(data=str(tmp_path / "u.data"), epochs=5, report_every=1000)
    # 32 batches of 512 hold the file's 16,000 training ratings (80 %), not synthetic data.
    assert result["examples_per_epoch"] == 32 * 512
    assert result["test_rmse"] < 0.75 * baseline


def test_a_stop_mid_epoch_saves_there_and_the_rerun_finishes_the_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0

    def after_step_100(self: CheckpointManager) -> bool:
        nonlocal calls
        calls += 1
        return calls == 100

    monkeypatch.setattr(CheckpointManager, "stop_requested", after_step_100)
    with pytest.raises(StopRequested) as stopped:
        movielens.train(epochs=3, dim=8, checkpoint_dir=str(tmp_path))
    assert (stopped.value.step, stopped.value.checkpoint) == (100, "step-000000000100")
    monkeypatch.undo()

    result = movielens.train(epochs=3, dim=8, checkpoint_dir=str(tmp_path))
    steps_per_epoch = result["examples_per_epoch"] // 512
    assert 100 % steps_per_epoch  # the checkpoint is mid-epoch
    assert result["resumed_from_step"] == 100
    assert result["steps"] == result["completed_steps"] == 3 * steps_per_epoch
    assert len(result["test_rmse_history"]) == 3 - 100 // steps_per_epoch
