"""Keeping the best model: a succeeded job's checkpoint exported, registered, loaded back.

The done-means test trains the MovieLens MF example in-process, exports the job's model
through the service, loads it with `ps_runtime.load_model` and reproduces the job's test
RMSE the way `movielens.evaluate` computes it."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.utils import timezone
from trainhub.audit.models import AuditEntry
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.registry.models import ModelVersion
from trainhub.registry.services import ModelExportError, export_job_model, model_file

import ps_runtime
from ps_runtime.examples import movielens
from ps_runtime.models.mf import predict

from ..factories import make_job
from .conftest import TRAIN_ARGS, World, succeeded

pytestmark = pytest.mark.django_db


def model_rmse(path: Path) -> float:
    """Test RMSE of the model at `path`, as movielens.evaluate computes it."""
    model = ps_runtime.load_model(path)
    dataset = movielens.load_dataset(None, None, TRAIN_ARGS["seed"])
    mean = float(np.mean(dataset.train.ratings))
    t = dataset.test
    users, items = model.tables["mf/users"], model.tables["mf/items"]
    pred = np.clip(predict(users.lookup(t.users), items.lookup(t.items), mean), 1.0, 5.0)
    return float(np.sqrt(np.mean((pred - t.ratings) ** 2)))


def test_the_registered_model_reproduces_the_jobs_test_rmse(world: World) -> None:
    version = export_job_model(job=world.job, user=world.alice, name="mf-best", now=timezone.now())
    path = model_file(version)
    assert abs(model_rmse(path) - world.test_rmse) <= 1e-6
    assert (version.team.slug, version.name, version.version) == ("recsys", "mf-best", 1)
    assert version.size == path.stat().st_size
    assert version.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["manifest.json", "tables.npz"]
        assert json.loads(z.read("manifest.json")) == version.manifest
    manifest = version.manifest
    assert manifest["job_id"] == world.job.pk and manifest["name"] == "mf-best"
    assert manifest["spec"] == world.job.spec
    assert manifest["metrics"] == {"test_rmse": world.test_rmse}
    assert manifest["result"] == {"test_rmse": world.test_rmse}
    assert manifest["code_digest"] is None
    env = json.dumps(world.job.spec["environment"], sort_keys=True, separators=(",", ":"))
    assert manifest["environment_digest"] == "sha256:" + hashlib.sha256(env.encode()).hexdigest()
    assert set(manifest["tables"]) == {"mf/users", "mf/items"}
    assert manifest["tables"]["mf/users"]["dim"] == TRAIN_ARGS["dim"] + 1
    entry = AuditEntry.objects.get(action="model.register")
    assert entry.actor == world.alice and entry.object_id == str(version.pk)
    assert entry.after == {
        "name": "mf-best",
        "version": 1,
        "job": world.job.pk,
        "digest": version.digest,
    }


def test_versions_count_up_per_team_and_name(world: World) -> None:
    now = timezone.now()
    first = export_job_model(job=world.job, user=world.alice, name="mf", now=now)
    second = export_job_model(job=world.job, user=world.alice, name="mf", now=now)
    other = export_job_model(job=world.job, user=world.alice, name="mf-other", now=now)
    assert [first.version, second.version, other.version] == [1, 2, 1]
    assert model_file(second).name == "2.zip" and model_file(first).is_file()
    assert not list((model_file(first).parent.parent.parent / ".incoming").iterdir())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Enter a model name"),
        ("MF", "Enter a model name"),
        ("../etc", "Enter a model name"),
        ("a" * 64, "Enter a model name"),
        (7, r"Enter a model name \(a string\)\."),
    ],
)
def test_a_bad_name_is_refused_naming_the_field(world: World, name: object, message: str) -> None:
    with pytest.raises(ModelExportError, match=message) as info:
        export_job_model(job=world.job, user=world.alice, name=name, now=timezone.now())
    assert info.value.field == "name"
    assert (
        not ModelVersion.objects.exists()
        and not AuditEntry.objects.filter(action="model.register").exists()
    )


def test_a_job_that_did_not_succeed_or_never_saved_is_refused(world: World) -> None:
    Job.objects.filter(pk=world.job.pk).update(state=JobState.FAILED)
    world.job.refresh_from_db()
    with pytest.raises(ModelExportError, match=r"is failed: only a succeeded job") as info:
        export_job_model(job=world.job, user=world.alice, name="mf", now=timezone.now())
    assert info.value.field == "job"
    unsaved = succeeded(make_job(world.alice), None)
    with pytest.raises(ModelExportError, match="has no committed checkpoint") as info:
        export_job_model(job=unsaved, user=world.alice, name="mf", now=timezone.now())
    assert info.value.field == "job"
    assert not ModelVersion.objects.exists()


def test_a_trial_run_that_a_later_run_continued_is_refused(world: World) -> None:
    # A promoted trial's next run writes into the same directory: the model there is its.
    later = make_job(world.alice, name="trial-1")
    Job.objects.filter(pk=later.pk).update(checkpoints_of=world.job)
    with pytest.raises(ModelExportError, match=f"Job {later.pk} continued job") as info:
        export_job_model(job=world.job, user=world.alice, name="mf", now=timezone.now())
    assert info.value.field == "job"
    assert not ModelVersion.objects.exists()
