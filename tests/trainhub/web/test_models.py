"""The job page's model section, its "Export model" form and the Models page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from trainhub.registry.models import ModelVersion
from trainhub.registry.services import export_job_model

from ..factories import make_job
from ..registry.conftest import Trained, World, build_world, model_roots, train_mf

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return train_mf(tmp_path_factory.mktemp("mf"))


@pytest.fixture
def world(db: Any, tmp_path: Path, trained: Trained) -> Iterator[World]:
    with model_roots(tmp_path):
        yield build_world(trained)


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_succeeded_jobs_page_offers_the_download_and_to_members_the_form(world: World) -> None:
    page = _client(world.alice).get(f"/jobs/{world.job.pk}/").content.decode()
    assert f'href="/api/v1/jobs/{world.job.pk}/model/" download>Download model</a>' in page
    assert f'action="/jobs/{world.job.pk}/model/"' in page and 'for="model-name"' in page
    viewer = _client(world.vic).get(f"/jobs/{world.job.pk}/").content.decode()
    assert "Download model" in viewer and 'id="model-name"' not in viewer
    pending = make_job(world.alice)
    assert "Download model" not in _client(world.alice).get(f"/jobs/{pending.pk}/").content.decode()


def test_export_registers_a_version_and_the_models_page_lists_it(world: World) -> None:
    client = _client(world.alice)
    response = client.post(f"/jobs/{world.job.pk}/model/", {"name": "mf-best"})
    assert response.status_code == 303 and response["Location"] == "/models/"
    version = ModelVersion.objects.get()
    assert (version.name, version.version, version.created_by) == ("mf-best", 1, world.alice)
    page = client.get("/models/").content.decode()
    assert "Registered mf-best v1 from job" in page
    assert f'href="/api/v1/models/{version.pk}/download/" download>' in page
    assert 'aria-current="page">Models</a>' in page
    assert "mf-best" not in _client(world.eve).get("/models/").content.decode()


def test_a_bad_name_is_shown_beside_the_field_and_changes_nothing(world: World) -> None:
    response = _client(world.alice).post(f"/jobs/{world.job.pk}/model/", {"name": "Best Model"})
    assert response.status_code == 400
    body = response.content.decode()
    assert 'id="model-name-error">Enter a model name' in body
    assert 'value="Best Model" aria-invalid="true"' in body  # what was typed survives
    assert not ModelVersion.objects.exists()


def test_viewers_get_403_and_other_teams_404(world: World) -> None:
    url = f"/jobs/{world.job.pk}/model/"
    assert _client(world.vic).post(url, {"name": "mf"}).status_code == 403
    assert _client(world.eve).post(url, {"name": "mf"}).status_code == 404
    assert not ModelVersion.objects.exists()


def test_the_models_page_makes_a_fixed_number_of_queries(
    world: World, django_assert_num_queries: Any
) -> None:
    client = _client(world.alice)
    export_job_model(job=world.job, user=world.alice, name="mf", now=timezone.now())
    # session, user, navigation, versions (team, job and creator joined)
    with django_assert_num_queries(4):
        assert client.get("/models/").status_code == 200
    for i in range(3):
        export_job_model(job=world.job, user=world.alice, name=f"mf-{i}", now=timezone.now())
    with django_assert_num_queries(4):
        assert client.get("/models/").status_code == 200
