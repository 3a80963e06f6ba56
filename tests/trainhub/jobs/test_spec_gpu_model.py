"""`workers.resources.gpu_model`: a model some node has, or a 400 that names the field."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job
from trainhub.nodes.models import Node
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user

pytestmark = pytest.mark.django_db

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def _with_models(node: Node, *models: str) -> None:
    node.gpus = [
        {"index": i, "model": m, "memory_mb": 81920, "uuid": f"GPU-{node.pk}-{i}"}
        for i, m in enumerate(models)
    ]
    node.save(update_fields=["gpus"])


@pytest.fixture
def client() -> APIClient:
    alice = make_user("alice")
    make_team("vision", members={alice: Role.MEMBER})
    _with_models(make_node("a100s", cpus=8, gpus=2)[0], A100, A100)
    _with_models(make_node("h100s", cpus=8, gpus=1)[0], H100)
    api = APIClient()
    api.force_authenticate(alice)
    return api


def _post(client: APIClient, resources: dict[str, Any]) -> Any:
    body = {
        "name": "vit",
        "team": "vision",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "workers": {"min": 1, "resources": {"cpu": 1, "memory_mb": 512, **resources}},
    }
    return client.post("/api/v1/jobs/", body, format="json")


def _field_errors(response: Any) -> list[str]:
    assert response.status_code == 400, response.json()
    errors: list[str] = response.json()["workers"]["resources"]["gpu_model"]
    return errors


def test_a_model_a_node_has_is_stored_and_read_back(client: APIClient) -> None:
    response = _post(client, {"gpu": 2, "gpu_model": A100})
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["workers"]["resources"]["gpu_model"] == A100
    job = Job.objects.get()
    assert JobSpec.from_dict(job.spec).workers.resources.gpu_model == A100


def test_without_a_model_the_stored_spec_has_no_gpu_model(client: APIClient) -> None:
    response = _post(client, {"gpu": 1})
    assert response.status_code == 201, response.json()
    assert "gpu_model" not in response.json()["spec"]["workers"]["resources"]


def test_a_model_no_node_has_is_refused_naming_the_field(client: APIClient) -> None:
    [message] = _field_errors(_post(client, {"gpu": 1, "gpu_model": "Tesla T4"}))
    assert "no node has it" in message and A100 in message and H100 in message
    assert not Job.objects.exists()


def test_more_gpus_of_a_model_than_any_node_has_is_refused(client: APIClient) -> None:
    [message] = _field_errors(_post(client, {"gpu": 2, "gpu_model": H100}))
    assert "the most any node has is 1" in message


def test_a_model_without_gpus_is_refused(client: APIClient) -> None:
    [message] = _field_errors(_post(client, {"gpu_model": A100}))
    assert "at least 1" in message


@pytest.mark.parametrize("role", ["parameter_servers", "coordinator"])
def test_only_workers_take_a_gpu_model(client: APIClient, role: str) -> None:
    body = {
        "name": "vit",
        "team": "vision",
        "entrypoint": "ps_runtime.examples.movielens:train",
        role: {"resources": {"gpu_model": A100}},
    }
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert "gpu_model" in response.json()[role]["resources"]
