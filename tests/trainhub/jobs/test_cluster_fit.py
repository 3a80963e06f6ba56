"""A job that the whole cluster could never hold is refused at submission, naming the
field and the numbers, by the API, its dry run, the web form and its "Check"; the submit
form's defaults fit the cluster; the job page shows what the job asks in all."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job
from trainhub.jobs.services import submit_job
from trainhub.jobs.spec import parse_job_spec
from trainhub.nodes.choices import NodeState
from trainhub.nodes.credentials import revoke_node_credential
from trainhub.nodes.services import set_node_state
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Quota
from trainhub.web.forms import JobSpecForm, default_document

from ..factories import make_node, make_team, make_user

pytestmark = pytest.mark.django_db

ONE = {"cpu": 1, "memory_mb": 512}


@pytest.fixture
def alice() -> Any:
    """alice, a member of recsys, whose quota is larger than any cluster below."""
    user = make_user("alice")
    make_team("recsys", members={user: Role.MEMBER}, cpu=64, memory_mb=262144, gpu=8)
    return user


def _spec(**overrides: Any) -> dict[str, Any]:
    """Coordinator, one PS and one worker of 1 CPU and 512 MiB each: 3 CPUs in all."""
    spec: dict[str, Any] = {
        "name": "mf",
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "parameter_servers": {"replicas": 1, "resources": ONE},
        "workers": {"min": 1, "max": 1, "resources": ONE},
        "coordinator": {"resources": ONE},
    }
    spec.update(overrides)
    return spec


def _post(user: Any, body: dict[str, Any], query: str = "") -> Any:
    api = APIClient()
    api.force_authenticate(user)
    return api.post(f"/api/v1/jobs/{query}", body, format="json")


def _error(response: Any, *path: str) -> str:
    node: Any = response.json()
    for key in path:
        assert key in node, f"the error does not name {'.'.join(path)}: {response.json()}"
        node = node[key]
    return " ".join(node)


def test_a_gang_larger_than_the_whole_cluster_is_refused_with_the_numbers(alice: Any) -> None:
    make_node(cpus=2, memory_mb=8192)
    response = _post(alice, _spec())
    assert response.status_code == 400
    message = _error(response, "workers", "resources", "cpu")
    assert "needs 3 CPUs in all" in message
    assert "coordinator 1, 1 parameter server of 1, 1 worker of 1)" in message
    assert "the whole cluster has 2 (1 node)" in message
    assert set(response.json()) == {"workers"}  # memory (1536 of 8192 MiB) fits
    assert not Job.objects.exists()


def test_the_dry_run_refuses_it_alike(alice: Any) -> None:
    make_node(cpus=2, memory_mb=8192)
    response = _post(alice, _spec(), "?dry_run=true")
    assert response.status_code == 400
    assert "the whole cluster has 2 (1 node)" in _error(response, "workers", "resources", "cpu")
    assert not Job.objects.exists()


def test_the_cluster_is_every_node_together(alice: Any) -> None:
    make_node("node-1", cpus=2, memory_mb=8192)
    make_node("node-2", cpus=2, memory_mb=8192)
    assert _post(alice, _spec()).status_code == 201  # 3 CPUs of 4
    too_big = _spec(workers={"min": 3, "max": 4, "resources": ONE})
    response = _post(alice, too_big)
    assert response.status_code == 400
    message = _error(response, "workers", "resources", "cpu")
    assert "needs 5 CPUs in all" in message and "3 workers of 1 each" in message
    assert "the whole cluster has 4 (2 nodes)" in message
    assert Job.objects.count() == 1


def test_the_field_named_is_the_role_asking_for_the_most(alice: Any) -> None:
    make_node("node-1", cpus=8, memory_mb=2048)
    make_node("node-2", cpus=8, memory_mb=2048)
    big_ps = {"replicas": 4, "resources": {"cpu": 1, "memory_mb": 1024}}
    response = _post(alice, _spec(parameter_servers=big_ps))
    assert response.status_code == 400
    message = _error(response, "parameter_servers", "resources", "memory_mb")
    assert "needs 5120 MiB of memory in all" in message
    assert "4 parameter servers of 1024 each" in message
    assert "the whole cluster has 4096 (2 nodes)" in message
    assert not Job.objects.exists()


def test_gpus_are_summed_over_the_nodes_too(alice: Any) -> None:
    make_node("node-1", cpus=8, memory_mb=32768, gpus=1)
    make_node("node-2", cpus=8, memory_mb=32768, gpus=1)
    gpu_workers = {"min": 3, "max": 3, "resources": {"cpu": 1, "memory_mb": 512, "gpu": 1}}
    response = _post(alice, _spec(workers=gpu_workers))
    assert response.status_code == 400
    message = _error(response, "workers", "resources", "gpu")
    assert "needs 3 GPUs in all" in message and "the whole cluster has 2 (2 nodes)" in message
    assert not Job.objects.exists()


def test_a_task_larger_than_every_node_is_refused_beside_its_field(alice: Any) -> None:
    make_node("node-1", cpus=2, memory_mb=8192)
    make_node("node-2", cpus=2, memory_mb=8192)
    ps = {"replicas": 1, "resources": {"cpu": 3, "memory_mb": 512}}
    response = _post(alice, _spec(parameter_servers=ps))
    assert response.status_code == 400
    message = _error(response, "parameter_servers", "resources", "cpu")
    assert message == "3 CPUs per task requested, but the largest node has 2 CPUs."
    assert not Job.objects.exists()


@pytest.mark.parametrize("role", ["workers", "parameter_servers", "coordinator"])
def test_memory_per_task_larger_than_every_node_is_refused_beside_its_field(
    alice: Any, role: str
) -> None:
    """Memory as well as CPUs, for every role: the coordinator's one task too."""
    make_node("node-1", cpus=8, memory_mb=8192)
    make_node("node-2", cpus=8, memory_mb=8192)  # 16384 MiB in all: the whole gang fits
    body = _spec()
    body[role] = {**body[role], "resources": {"cpu": 1, "memory_mb": 12288}}
    for query in ("", "?dry_run=true"):
        response = _post(alice, body, query)
        assert response.status_code == 400, response.content
        assert set(response.json()) == {role}
        message = _error(response, role, "resources", "memory_mb")
        assert message == (
            "12288 MiB of memory per task requested, but the largest node has 8192 MiB of memory."
        )
    assert not Job.objects.exists()


def test_a_coordinator_larger_than_every_node_is_refused_beside_its_field(alice: Any) -> None:
    for name in ("node-1", "node-2", "node-3"):  # 6 CPUs in all: the whole gang fits
        make_node(name, cpus=2, memory_mb=8192)
    body = _spec(coordinator={"resources": {"cpu": 2.5, "memory_mb": 512}})
    for query in ("", "?dry_run=true"):
        response = _post(alice, body, query)
        assert response.status_code == 400, response.content
        assert set(response.json()) == {"coordinator"}
        message = _error(response, "coordinator", "resources", "cpu")
        assert message == "2.5 CPUs per task requested, but the largest node has 2 CPUs."
    assert not Job.objects.exists()


def test_an_empty_cluster_refuses_nothing_for_its_size(alice: Any) -> None:
    """Nodes may join later (a scripted setup submits before its agents enroll)."""
    response = _post(alice, _spec(workers={"min": 40, "max": 40, "resources": ONE}))
    assert response.status_code == 201, response.json()


def test_draining_and_revoked_nodes_do_not_count(alice: Any) -> None:
    make_node("small", cpus=2, memory_mb=8192)
    leaving, _ = make_node("leaving", cpus=16, memory_mb=65536)
    gone, _ = make_node("gone", cpus=16, memory_mb=65536)
    cordoned, _ = make_node("cordoned", cpus=1, memory_mb=8192)
    set_node_state(node=leaving, state=NodeState.DRAINING)
    revoke_node_credential(node=gone)
    set_node_state(node=cordoned, state=NodeState.CORDONED)  # expected back: it counts
    response = _post(alice, _spec(workers={"min": 2, "max": 2, "resources": ONE}))
    assert response.status_code == 400
    message = _error(response, "workers", "resources", "cpu")
    assert "needs 4 CPUs in all" in message and "the whole cluster has 3 (2 nodes)" in message
    assert _post(alice, _spec()).status_code == 201  # 3 of the 3 counted CPUs


def _web(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(spec: JobSpec) -> dict[str, str]:
    """The submit form's fields holding `spec`, as the page shows them."""
    return {"tab": "form", "mode": "form", **JobSpecForm.initial_for(spec.to_dict())}


def test_the_web_form_and_its_check_show_the_refusal_beside_the_field(alice: Any) -> None:
    make_node(cpus=2, memory_mb=8192)
    fields = _form(JobSpec.from_dict(_spec()))
    client = _web(alice)
    page = unescape(client.post("/jobs/new/", fields).content.decode())
    beside = re.search(r'id="id_workers\.resources\.cpu_error">([^<]*)<', page)
    assert beside is not None, "no error beside CPU per worker"
    assert "needs 3 CPUs in all" in beside.group(1)
    assert "the whole cluster has 2 (1 node)" in beside.group(1)
    preview = unescape(client.post("/jobs/new/preview/", fields).content.decode())
    assert "<code>workers.resources.cpu</code> This job needs 3 CPUs in all" in preview
    assert not Job.objects.exists()


def _total(document: dict[str, Any]) -> tuple[float, int]:
    spec = JobSpec.from_dict({**document, "name": "x"})
    request = spec.request()
    return request.cpu, int(request.memory_mb)


def test_the_forms_defaults_fit_a_small_cluster_and_are_accepted(alice: Any) -> None:
    make_node(cpus=2, memory_mb=2048)
    document = default_document(team="recsys")
    cpu, memory = _total(document)
    assert cpu == pytest.approx(2.0) and memory == 2048
    assert document["workers"]["resources"] == {"cpu": 1.0, "memory_mb": 1024, "gpu": 0}
    assert document["coordinator"]["resources"] == {"cpu": 0.5, "memory_mb": 512}
    parse_job_spec(document, user=alice)  # unedited, name included: refuses nothing


def test_the_forms_defaults_fit_the_teams_ceiling(alice: Any) -> None:
    make_node(cpus=16, memory_mb=65536)
    Quota.objects.filter(team__slug="recsys").update(cpu=1, borrowing_limit_cpu=0.5)
    document = default_document(team="recsys")
    assert _total(document)[0] <= 1.5
    parse_job_spec({**document, "name": "first"}, user=alice)


def test_the_forms_defaults_stay_the_specs_where_they_fit(alice: Any) -> None:
    plain = JobSpec(name="", team="recsys", entrypoint="m:f").to_dict()
    # No node yet: nothing to fit.
    assert default_document(team="recsys")["workers"] == plain["workers"]
    make_node(cpus=8, memory_mb=32768)
    document = default_document(team="recsys")
    for role in ("workers", "parameter_servers", "coordinator"):
        assert document[role]["resources"] == plain[role]["resources"]


def test_the_job_page_shows_the_total_request(alice: Any) -> None:
    make_node(cpus=8, memory_mb=32768)
    spec = _spec(
        workers={"min": 2, "max": 3, "resources": {"cpu": 1.5, "memory_mb": 1024, "gpu": 0}},
        parameter_servers={"replicas": 2, "resources": {"cpu": 0.5, "memory_mb": 512}},
    )
    job = submit_job(user=alice, spec=parse_job_spec(spec, user=alice), now=timezone.now())
    page = unescape(_web(alice).get(f"/jobs/{job.pk}/").content.decode())
    total = re.search(r'id="job-request">(.*?)</dd>', page, re.S)
    assert total is not None
    text = re.sub(r"<[^>]+>", "", total.group(1))
    # 1 + 2 * 0.5 + 2 * 1.5 CPUs; 512 + 2 * 512 + 2 * 1024 MiB.
    assert text.startswith("5 CPUs, 3584 MiB of memory, 0 GPUs")
    assert "2 parameter servers and 2 workers" in text
    Job.objects.filter(pk=job.pk).update(target_workers=3)
    page = unescape(_web(alice).get(f"/jobs/{job.pk}/").content.decode())
    assert "6.5 CPUs, 4608 MiB of memory, 0 GPUs" in page
