"""`/jobs/new/`: a form and a YAML editor over one spec, validated as the API validates it;
a refused post creates nothing and keeps what was typed; a preview; clone; who may submit."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient
from trainhub.jobs.models import Job, JobEvent
from trainhub.tenancy.choices import Role
from trainhub.tenancy.models import Team
from trainhub.tenancy.resources import LimitResources
from trainhub.tenancy.services import set_priority_caps
from trainhub.web.forms import FIELDS, dump_yaml

from ..factories import make_job, make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db

SMALL = {"cpu": 0.5, "memory_mb": 512}


@pytest.fixture
def world() -> dict[str, Any]:
    """alice: member of recsys (2 CPUs), viewer of ads; vic: only a viewer; one 2-CPU node."""
    alice, vic, eve = make_user("alice"), make_user("vic"), make_user("eve")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=2, memory_mb=8192)
    make_team("ads", members={alice: Role.VIEWER, vic: Role.VIEWER}, cpu=0, memory_mb=0)
    make_node(cpus=2, memory_mb=32768)
    return {"alice": alice, "vic": vic, "eve": eve}


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(**overrides: str) -> dict[str, str]:
    """The form tab's fields, as a browser posts them: a small job that fits recsys."""
    fields = {
        "tab": "form",
        "mode": "form",
        "name": "web-mf",
        "team": "recsys",
        "priority": "normal",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": "{epochs: 2, dim: 8}",
        "parameter_servers.replicas": "1",
        "parameter_servers.resources.cpu": "0.5",
        "parameter_servers.resources.memory_mb": "512",
        "parameter_servers.replication": "0",
        "workers.min": "1",
        "workers.max": "1",
        "workers.resources.cpu": "0.5",
        "workers.resources.memory_mb": "512",
        "workers.resources.gpu": "0",
        "coordinator.resources.cpu": "0.5",
        "coordinator.resources.memory_mb": "512",
        "freeze_seconds": "60",
        "checkpoint_every_seconds": "120",
        "max_restarts": "2",
    }
    fields.update(overrides)
    return fields


def _yaml(document: dict[str, Any] | str) -> dict[str, str]:
    # Not yaml.safe_dump: it writes the resources these specs share as anchors and aliases,
    # which the page refuses.
    text = document if isinstance(document, str) else dump_yaml(document)
    return {"tab": "yaml", "mode": "yaml", "spec": text}


def _small_spec(**overrides: Any) -> dict[str, Any]:
    return spec(
        **{
            "parameter_servers": {"replicas": 1, "resources": SMALL},
            "workers": {"min": 1, "max": 1, "resources": SMALL},
            "coordinator": {"resources": SMALL},
            **overrides,
        }
    )


def _counts() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


def _field_error(page: str, path: str) -> str:
    """The error shown beside the form field named `path`."""
    found = re.search(rf'<p class="field-error" id="id_{re.escape(path)}_error">(.*?)</p>', page)
    assert found, f"no error beside {path}"
    return html.unescape(found.group(1))


def test_the_page_offers_both_editors_the_users_teams_and_the_examples(
    world: dict[str, Any],
) -> None:
    page = _client(world["alice"]).get("/jobs/new/").content.decode()
    assert '<label for="id_spec">Job spec (YAML)</label>' in page
    assert 'role="tablist"' in page and page.count('role="tab"') == 2
    teams = _options(page, 'id="id_team"')
    assert teams == ["recsys"]  # a viewer of ads may not submit there
    assert '<option value="ps_runtime.examples.movielens:train">' in page
    assert '<option value="ps_runtime.examples.ctr:train">' in page
    # Both editors start from the same spec.
    yaml_text = html.unescape(page.split('id="id_spec">')[1].split("</textarea>")[0])
    document = yaml.safe_load(yaml_text)
    assert document["team"] == "recsys"
    assert document["entrypoint"] == "ps_runtime.examples.movielens:train"


def test_viewers_and_people_in_no_team_cannot_submit(world: dict[str, Any]) -> None:
    for who in ("vic", "eve"):
        client = _client(world[who])
        response = client.get("/jobs/new/")
        assert response.status_code == 403, who
        assert "Viewers cannot submit" in response.content.decode()
        assert client.post("/jobs/new/", _form()).status_code == 403
        assert client.post("/jobs/new/preview/", _form()).status_code == 403
    assert _counts() == (0, 0)


def test_the_form_submits_and_goes_to_the_job_page(world: dict[str, Any]) -> None:
    response = _client(world["alice"]).post("/jobs/new/", _form())
    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.submitted_by == world["alice"]
    assert job.job_spec.args == {"epochs": 2, "dim": 8}
    assert job.job_spec.workers.resources.cpu == 0.5
    assert (job.job_spec.freeze_seconds, job.job_spec.max_restarts) == (60, 2)


def test_the_yaml_submits_the_document_the_api_takes(world: dict[str, Any]) -> None:
    document = _small_spec(name="from-yaml")
    response = _client(world["alice"]).post("/jobs/new/", _yaml(document))
    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    api = APIClient()
    api.force_authenticate(world["alice"])
    again = api.post("/api/v1/jobs/", document, format="json").json()
    assert Job.objects.get(pk=again["id"]).spec == job.spec


def test_a_refused_form_shows_the_error_beside_the_field_and_keeps_the_input(
    world: dict[str, Any],
) -> None:
    response = _client(world["alice"]).post(
        "/jobs/new/", _form(**{"workers.min": "3", "workers.max": "2", "name": "typed-name"})
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert _counts() == (0, 0)
    assert _field_error(page, "workers.max") == "max (2) must be at least min (3)."
    assert 'name="workers.min" value="3"' in page and 'value="typed-name"' in page
    assert 'aria-invalid="true"' in page


def test_replication_needs_more_servers_than_backups(world: dict[str, Any]) -> None:
    client = _client(world["alice"])
    page = client.post("/jobs/new/", _form(**{"parameter_servers.replication": "1"}))
    assert _counts() == (0, 0)
    error = _field_error(page.content.decode(), "parameter_servers.replication")
    assert error.startswith("Replication 1 needs at least 2 parameter servers")
    client.post(
        "/jobs/new/",
        _form(**{"parameter_servers.replicas": "2", "parameter_servers.replication": "1"}),
    )
    job = Job.objects.get()
    assert job.job_spec.parameter_servers.replication == 1
    assert "each shard on 2 of them" in client.get(f"/jobs/{job.pk}/").content.decode()


def test_the_form_and_the_api_give_the_same_messages(world: dict[str, Any]) -> None:
    api = APIClient()
    api.force_authenticate(world["alice"])
    refused = api.post(
        "/api/v1/jobs/", _small_spec(name="bad name!", team="nope"), format="json"
    ).json()
    page = (
        _client(world["alice"])
        .post("/jobs/new/", _form(name="bad name!", team="nope"))
        .content.decode()
    )
    assert _field_error(page, "name") == refused["name"][0]
    assert _field_error(page, "team") == refused["team"][0]
    assert _counts() == (0, 0)


def test_a_team_where_one_only_views_is_refused_beside_the_team(world: dict[str, Any]) -> None:
    page = _client(world["alice"]).post("/jobs/new/", _form(team="ads")).content.decode()
    assert _field_error(page, "team") == "Viewers of team 'ads' cannot submit jobs."
    assert _counts() == (0, 0)


def test_bad_args_are_named_beside_the_args(world: dict[str, Any]) -> None:
    page = _client(world["alice"]).post("/jobs/new/", _form(args="[1, 2")).content.decode()
    assert _field_error(page, "args").startswith("Not valid YAML")
    assert _counts() == (0, 0)


def test_a_refused_yaml_shows_the_field_path_beside_the_yaml_and_keeps_it(
    world: dict[str, Any],
) -> None:
    text = dump_yaml(_small_spec(workers={"min": 3, "max": 2, "resources": SMALL}))
    response = _client(world["alice"]).post("/jobs/new/", _yaml(text))
    page = response.content.decode()
    assert _counts() == (0, 0)
    beside = page.split('id="id_spec_error"')[1].split("</div>")[0]
    assert "<code>workers.max</code> max (2) must be at least min (3)." in beside
    assert html.unescape(page.split('id="id_spec">')[1].split("</textarea>")[0]).strip() == (
        text.strip()
    )
    # The YAML tab is the one shown.
    assert 'id="panel-yaml" role="tabpanel" aria-labelledby="tab-yaml" tabindex="-1">' in page
    assert 'aria-describedby="id_spec_error"' in page


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed", "Not valid YAML (line 1, column 16)"),
        ("- just\n- a list", "Expected a mapping of spec fields"),
        ("name: x\nteam: recsys\nentrypoint: a:b\nwrokers: {min: 1}", "Unknown field 'wrokers'."),
    ],
)
def test_bad_yaml_is_named_beside_the_yaml(world: dict[str, Any], text: str, expected: str) -> None:
    page = _client(world["alice"]).post("/jobs/new/", _yaml(text)).content.decode()
    beside = html.unescape(page.split('id="id_spec_error"')[1].split("</div>")[0])
    assert expected in beside
    assert _counts() == (0, 0)


def test_a_priority_cap_refusal_is_shown_beside_the_priority(world: dict[str, Any]) -> None:
    set_priority_caps(team=Team.objects.get(slug="recsys"), caps={"production": LimitResources(1)})
    page = _client(world["alice"]).post("/jobs/new/", _form(priority="production")).content.decode()
    assert "may run at most cpu 1 at production" in _field_error(page, "priority")
    assert _counts() == (0, 0)


def test_the_preview_fits_an_idle_cluster_and_creates_nothing(world: dict[str, Any]) -> None:
    response = _client(world["alice"]).post("/jobs/new/preview/", _form(mode=""))
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert "Fits now." in body
    assert _counts() == (0, 0)


def test_the_preview_says_why_it_would_wait_and_where_in_the_queue(
    world: dict[str, Any],
) -> None:
    alice = world["alice"]
    make_job(alice, **_small_spec(name="ahead", workers={"min": 2, "resources": SMALL}))
    before = _counts()
    body = (
        _client(alice)
        .post("/jobs/new/preview/", _yaml(_small_spec(workers={"min": 2, "resources": SMALL})))
        .content.decode()
    )
    assert "Would wait:" in body
    assert "team quota exhausted: cpu" in html.unescape(body)
    assert "<strong>#2</strong> in the queue" in body
    assert _counts() == before


def test_the_preview_lists_what_is_not_valid(world: dict[str, Any]) -> None:
    body = (
        _client(world["alice"])
        .post("/jobs/new/preview/", _form(**{"workers.min": "0"}))
        .content.decode()
    )
    assert "Not a valid spec yet" in body
    assert "<code>workers.min</code>" in body


def test_clone_prefills_both_editors_from_a_visible_job(world: dict[str, Any]) -> None:
    job = make_job(world["alice"], **_small_spec(name="original", args={"epochs": 7}))
    page = _client(world["alice"]).get(f"/jobs/new/?clone={job.pk}").content.decode()
    assert 'name="name" value="original-copy"' in page
    assert 'name="workers.resources.cpu" value="0.5"' in page
    assert "{epochs: 7}" in page
    document = yaml.safe_load(html.unescape(page.split('id="id_spec">')[1].split("</textarea>")[0]))
    assert document == {**job.spec, "name": "original-copy"}


def test_clone_of_a_job_one_cannot_see_is_not_found(world: dict[str, Any]) -> None:
    carol = make_user("carol")
    make_team("vision", members={carol: Role.MEMBER})
    hidden = make_job(carol, team="vision", name="secret")
    client = _client(world["alice"])
    assert client.get(f"/jobs/new/?clone={hidden.pk}").status_code == 404
    assert client.get("/jobs/new/?clone=abc").status_code == 404


def test_switching_tabs_converts_one_editor_into_the_other(world: dict[str, Any]) -> None:
    client = _client(world["alice"])
    as_yaml = client.post("/jobs/new/convert/", {**_form(), "to": "yaml"}).json()["yaml"]
    document = yaml.safe_load(as_yaml)
    assert document["workers"] == {"min": 1, "max": 1, "resources": {**SMALL, "gpu": 0}}
    assert list(document)[:4] == ["name", "team", "priority", "entrypoint"]
    back = client.post("/jobs/new/convert/", {"to": "form", "spec": as_yaml}).json()["fields"]
    # Every field comes back; those left blank (code, environment) blank.
    typed = {k: v for k, v in _form().items() if k not in ("tab", "mode")}
    assert dict.fromkeys(FIELDS, "") | typed == back | {"args": "{epochs: 2, dim: 8}"}
    refused = client.post("/jobs/new/convert/", {"to": "form", "spec": "a: [1"}).json()
    assert refused["error"]["path"] == "spec"


def test_the_page_makes_a_fixed_number_of_queries(
    world: dict[str, Any], django_assert_num_queries: Any
) -> None:
    """session, user, navigation, the user's teams, then the nodes and the team's quota
    that the new job's defaults are sized to (or the cloned job)."""
    job = make_job(world["alice"], **_small_spec(name="original"))
    client = _client(world["alice"])
    with django_assert_num_queries(6):
        assert client.get("/jobs/new/").status_code == 200
    with django_assert_num_queries(5):
        assert client.get(f"/jobs/new/?clone={job.pk}").status_code == 200


def _options(page: str, select: str) -> list[str]:
    """The values a <select> offers."""
    return re.findall(r'<option value="([\w-]+)"', page.split(select)[1].split("</select>")[0])
