"""A MovieLens MF model trained once per session into a checkpoint directory, and jobs
that own a copy of it (CHECKPOINT_ROOT and MODEL_ROOT under the test's tmp_path)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.telemetry.logchunks import store_lines
from trainhub.telemetry.results import COORDINATOR_SOURCE, RESULT_PREFIX
from trainhub.telemetry.services import write_points
from trainhub.tenancy.choices import Role

from ps_runtime.examples import movielens

from ..factories import make_job, make_team, make_user

# Small and quick, but a real run: 2 epochs of synthetic ratings, a checkpoint at the end.
TRAIN_ARGS: dict[str, Any] = {"epochs": 2, "dim": 8, "seed": 3, "batch_size": 1024}


@dataclass(frozen=True)
class Trained:
    checkpoints: Path  # the run's checkpoint directory (ckpt-<step>/…)
    result: dict[str, Any]  # what movielens.train returned


def train_mf(directory: Path) -> Trained:
    """Train the MF example in-process, checkpointing into `directory`/checkpoints."""
    root = directory / "checkpoints"
    result = movielens.train(checkpoint_dir=str(root), **TRAIN_ARGS)
    return Trained(root, result)


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return train_mf(tmp_path_factory.mktemp("mf"))


@dataclass(frozen=True)
class World:
    alice: User  # member of recsys
    vic: User  # viewer of recsys
    eve: User  # member of another team
    job: Job  # alice's succeeded MF job, its checkpoints those of `trained`
    test_rmse: float


@contextmanager
def model_roots(tmp_path: Path) -> Iterator[Path]:
    """CHECKPOINT_ROOT and MODEL_ROOT under `tmp_path`."""
    with override_settings(
        CHECKPOINT_ROOT=str(tmp_path / "checkpoints"), MODEL_ROOT=str(tmp_path / "models")
    ):
        yield tmp_path


@pytest.fixture
def roots(tmp_path: Path) -> Iterator[Path]:
    with model_roots(tmp_path):
        yield tmp_path


def succeeded(job: Job, trained: Trained | None) -> Job:
    """`job` as it ends: succeeded, its checkpoints, metrics and result those of `trained`."""
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    job.refresh_from_db()
    if trained is not None:
        shutil.copytree(trained.checkpoints, job.checkpoint_dir)
        history = trained.result["test_rmse_history"]
        write_points(job.pk, [("test_rmse", epoch, v) for epoch, v in enumerate(history, start=1)])
        store_lines(
            job_id=job.pk,
            task_id=None,
            source=COORDINATOR_SOURCE,
            stream="stdout",
            time=timezone.now(),
            texts=[RESULT_PREFIX + f'{{"test_rmse": {trained.result["test_rmse"]!r}}}}}'],
        )
    return job


def build_world(trained: Trained) -> World:
    """Alice's succeeded MF job (checkpoints of `trained`), a viewer, another team's eve."""
    alice, vic, eve = make_user("alice"), make_user("vic"), make_user("eve")
    make_team("recsys", members={alice: Role.MEMBER, vic: Role.VIEWER})
    make_team("vision", members={eve: Role.MEMBER})
    job = succeeded(
        make_job(
            alice,
            args=TRAIN_ARGS,
            environment={"requirements": ["numpy"]},
        ),
        trained,
    )
    return World(alice, vic, eve, job, trained.result["test_rmse"])


@pytest.fixture
def world(db: Any, roots: Path, trained: Trained) -> World:
    return build_world(trained)
