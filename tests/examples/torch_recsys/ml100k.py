"""ml-100k's u1 split for the example tests: the real files when ../shared has them, else
generated files in their format."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
SHARED_ML100K = REPO.parent / "shared" / "datasets" / "ml-100k"
# The TensorFlow PS baseline's final test RMSE on u1 is 0.9226 (median of 5 runs,
# ../shared/baselines/tensorflow_ps.md): matching it means 0.925 or better.
U1_RMSE_BAR = 0.925


@dataclass(frozen=True)
class Split:
    """Paths of a train and a test file in ml-100k's format, and facts to judge RMSE."""

    base: Path
    test: Path
    generated: bool
    mean_rmse: float  # RMSE of predicting the training mean on the test file
    floor_rmse: float  # RMSE of the hidden model itself (generated data only; else 0)


def _rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - truth) ** 2)))


def _ratings(path: Path) -> np.ndarray:
    return np.loadtxt(path, usecols=(2,), ndmin=1)


def u1_split(directory: Path) -> Split:
    """ml-100k's u1.base/u1.test when ../shared has them, else files written into
    `directory` in the same format: 943 users, 1,682 items, 100,000 ratings (80/20), from
    hidden rank-3 tastes plus user and item biases, Gaussian noise (sd 0.35), rounded
    and clipped to 1..5."""
    if (SHARED_ML100K / "u1.base").is_file() and (SHARED_ML100K / "u1.test").is_file():
        base, test = SHARED_ML100K / "u1.base", SHARED_ML100K / "u1.test"
        mean = float(np.mean(_ratings(base)))
        return Split(base, test, False, _rmse(np.full(20_000, mean), _ratings(test)), 0.0)
    rng = np.random.default_rng(100)
    users, items, n, rank = 943, 1682, 100_000, 3
    p, q = rng.normal(0, 0.6, (users, rank)), rng.normal(0, 0.6, (items, rank))
    bu, bi = rng.normal(0, 0.4, users), rng.normal(0, 0.4, items)
    u, i = rng.integers(0, users, n), rng.integers(0, items, n)
    clean = 3.5 + bu[u] + bi[i] + np.sum(p[u] * q[i], axis=1)
    ratings = np.clip(np.rint(clean + rng.normal(0, 0.35, n)), 1, 5).astype(int)
    stamps = 874_724_710 + rng.integers(0, 10**7, n)
    rows = [
        f"{a}\t{b}\t{c}\t{d}\n" for a, b, c, d in zip(u + 1, i + 1, ratings, stamps, strict=True)
    ]
    base, test = directory / "u1.base", directory / "u1.test"
    base.write_text("".join(rows[:80_000]))
    test.write_text("".join(rows[80_000:]))
    truth = ratings[80_000:]
    return Split(
        base,
        test,
        True,
        _rmse(np.full(len(truth), ratings[:80_000].mean()), truth),
        _rmse(np.clip(clean[80_000:], 1, 5), truth),
    )
