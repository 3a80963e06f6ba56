"""`/api/v1/jobs/{id}/model/` and `/api/v1/models/`: export, register, list, download."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import FileResponse
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.audit.models import AuditEntry
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.registry.models import ModelVersion
from trainhub.registry.services import export_job_model

from ..registry.conftest import Trained, World, build_world, model_roots, train_mf
from ..registry.test_services import model_rmse

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return train_mf(tmp_path_factory.mktemp("mf"))


@pytest.fixture
def world(db: Any, tmp_path: Path, trained: Trained) -> Iterator[World]:
    """Alice's succeeded MF job (tests/trainhub/registry/conftest.py), roots in tmp_path."""
    with model_roots(tmp_path):
        yield build_world(trained)


def _as(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _zip(response: Any, tmp_path: Path, name: str) -> Path:
    assert isinstance(response, FileResponse)
    assert response["Content-Type"] == "application/zip"
    path = tmp_path / name
    path.write_bytes(b"".join(response.streaming_content))  # type: ignore[arg-type]
    return path


def test_register_list_and_download_reproduce_the_jobs_rmse(world: World, tmp_path: Path) -> None:
    client = _as(world.alice)
    created = client.post(f"/api/v1/jobs/{world.job.pk}/model/", {"name": "mf-best"})
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["team"], body["name"], body["version"], body["job"]) == (
        "recsys",
        "mf-best",
        1,
        world.job.pk,
    )
    assert body["created_by"] == "alice" and body["digest"].startswith("sha256:")
    listed = client.get("/api/v1/models/").json()
    assert [m["id"] for m in listed["results"]] == [body["id"]]
    by_job = client.get(f"/api/v1/models/?job={world.job.pk}&name=mf-best").json()["results"]
    assert [m["id"] for m in by_job] == [body["id"]]
    for other in ("0", "abc", "9" * 40):
        found = client.get(f"/api/v1/models/?job={other}")
        assert found.status_code == 200 and found.json()["results"] == [], other
    download = client.get(body["download_url"])
    assert download.status_code == 200
    assert "mf-best-v1.zip" in download["Content-Disposition"]
    path = _zip(download, tmp_path, "registered.zip")
    assert path.stat().st_size == body["size"]
    assert abs(model_rmse(path) - world.test_rmse) <= 1e-6
    # The job's model is now its newest registered version, byte for byte.
    again = _zip(client.get(f"/api/v1/jobs/{world.job.pk}/model/"), tmp_path, "job.zip")
    assert again.read_bytes() == path.read_bytes()


def test_download_without_a_version_exports_on_demand_and_registers_nothing(
    world: World, tmp_path: Path
) -> None:
    response = _as(world.vic).get(f"/api/v1/jobs/{world.job.pk}/model/")  # viewers download
    assert response.status_code == 200
    assert f"job-{world.job.pk}-model.zip" in response["Content-Disposition"]
    path = _zip(response, tmp_path, "fresh.zip")
    assert abs(model_rmse(path) - world.test_rmse) <= 1e-6
    assert not ModelVersion.objects.exists()
    models = tmp_path / "models"
    assert [p for p in models.rglob("*") if p.is_file()] == []  # no temp file left


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "Best Model"}, "Enter a model name"),
        ({"name": ""}, "This field may not be blank."),
        ({"name": 5}, "Expected a string."),
        ({}, "This field is required."),
        ({"name": "mf", "version": 3}, "Unknown field 'version'."),
    ],
)
def test_bad_input_is_400_naming_the_field_and_changes_nothing(
    world: World, body: dict[str, Any], message: str
) -> None:
    response = _as(world.alice).post(f"/api/v1/jobs/{world.job.pk}/model/", body)
    assert response.status_code == 400
    (field,) = response.json()
    assert field == ("version" if "version" in body else "name")
    assert response.json()[field][0].startswith(message)
    assert (
        not ModelVersion.objects.exists()
        and not AuditEntry.objects.filter(action="model.register").exists()
    )


def test_a_job_that_did_not_succeed_is_409(world: World) -> None:
    Job.objects.filter(pk=world.job.pk).update(state=JobState.CANCELLED)
    client = _as(world.alice)
    url = f"/api/v1/jobs/{world.job.pk}/model/"
    for response in (client.get(url), client.post(url, {"name": "mf"})):
        assert response.status_code == 409
        assert "only a succeeded job exports a model" in response.json()["detail"]
    assert not ModelVersion.objects.exists()


def test_other_teams_get_404_and_viewers_cannot_register(world: World) -> None:
    version = export_job_model(job=world.job, user=world.alice, name="mf", now=timezone.now())
    eve = _as(world.eve)
    url = f"/api/v1/jobs/{world.job.pk}/model/"
    assert eve.get(url).status_code == 404
    assert eve.post(url, {"name": "stolen"}).status_code == 404
    assert eve.get(f"/api/v1/models/{version.pk}/download/").status_code == 404
    assert eve.get(f"/api/v1/models/{version.pk}/").status_code == 404
    assert eve.get("/api/v1/models/").json()["results"] == []
    refused = _as(world.vic).post(url, {"name": "mf"})
    assert refused.status_code == 403
    assert ModelVersion.objects.count() == 1
    assert APIClient().get(url).status_code in (401, 403)


def test_the_list_makes_a_fixed_number_of_queries(
    world: World, django_assert_num_queries: Any
) -> None:
    client = _as(world.alice)
    export_job_model(job=world.job, user=world.alice, name="mf", now=timezone.now())
    with django_assert_num_queries(2):  # count, page (team and creator joined)
        assert client.get("/api/v1/models/").status_code == 200
    for i in range(3):
        export_job_model(job=world.job, user=world.alice, name=f"mf-{i}", now=timezone.now())
    with django_assert_num_queries(2):
        assert len(client.get("/api/v1/models/").json()["results"]) == 4


def test_the_schema_documents_the_model_endpoints() -> None:
    from ..factories import make_user

    schema = _as(make_user("sam")).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    register = schema["paths"]["/api/v1/jobs/{id}/model/"]["post"]
    assert {"201", "400", "403", "404", "409"} <= set(register["responses"])
    assert register["tags"] == ["jobs"]
    download = schema["paths"]["/api/v1/models/{id}/download/"]["get"]
    assert "application/zip" in download["responses"]["200"]["content"]
    assert schema["components"]["schemas"]["ModelExportRequest"]["additionalProperties"] is False
