"""The submit page reads YAML bounded: no anchors or aliases (a "billion laughs" of a few
hundred bytes would otherwise hold a web worker), at most 64 KiB. Each refusal names the
field it is about, keeps what was typed and creates nothing."""

from __future__ import annotations

import html
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.specyaml import MAX_SPEC_BYTES
from trainhub.tenancy.choices import Role
from trainhub.web.forms import dump_yaml

from ..factories import make_node, make_team, make_user

pytestmark = pytest.mark.django_db

SPEC = """\
name: small
team: recsys
entrypoint: ps_runtime.examples.movielens:train
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 512}}
workers: {min: 1, max: 1, resources: {cpu: 0.5, memory_mb: 512}}
coordinator: {resources: {cpu: 0.5, memory_mb: 512}}
"""
# Four levels of ten: 10,000 strings from six lines (nine levels hold a worker for good).
LAUGHS = SPEC + (
    "args:\n"
    "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    "  l1: &l1 [*l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0]\n"
    "  l2: &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1]\n"
    "  l3: [*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]\n"
)
REFUSED_ALIASES = "YAML anchors and aliases (&name, *name) are not allowed"


@pytest.fixture
def alice() -> User:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=2, memory_mb=8192)
    make_node(cpus=2, memory_mb=32768)
    return alice


def _post(user: User, path: str, data: dict[str, str]) -> str:
    client = Client()
    client.force_login(user)
    response = client.post(path, data)
    assert response.status_code == 200
    return response.content.decode()


def _beside_spec(page: str) -> str:
    return html.unescape(page.split('id="id_spec_error"')[1].split("</div>")[0])


def _typed_spec(page: str) -> str:
    return html.unescape(page.split('id="id_spec">')[1].split("</textarea>")[0])


def _nothing_created() -> bool:
    return not Job.objects.exists() and not JobEvent.objects.exists()


def test_an_alias_bomb_in_the_yaml_is_refused_beside_the_spec(alice: User) -> None:
    page = _post(alice, "/jobs/new/", {"tab": "yaml", "mode": "yaml", "spec": LAUGHS})
    assert f"{REFUSED_ALIASES} (line 8, column 7): write each value out in full." in (
        _beside_spec(page)
    )
    assert _typed_spec(page).strip() == LAUGHS.strip()
    assert _nothing_created()


def test_one_alias_is_refused_too(alice: User) -> None:
    text = SPEC + "args: {a: &a [1, 2], b: *a}\n"
    page = _post(alice, "/jobs/new/", {"tab": "yaml", "mode": "yaml", "spec": text})
    assert REFUSED_ALIASES in _beside_spec(page)
    assert _nothing_created()


def test_an_alias_in_the_forms_arguments_is_refused_beside_the_arguments(alice: User) -> None:
    form = {
        "tab": "form",
        "mode": "form",
        "name": "small",
        "team": "recsys",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": "{a: &a [1, 2], b: *a}",
    }
    page = _post(alice, "/jobs/new/", form)
    beside = html.unescape(page.split('id="id_args_error">')[1].split("</p>")[0])
    assert beside.startswith(f"{REFUSED_ALIASES} (line 1, column 5)")
    assert _nothing_created()


def test_a_spec_over_64_kib_is_refused_with_the_limit_named(alice: User) -> None:
    text = SPEC + "# " + "x" * MAX_SPEC_BYTES + "\n"  # valid YAML, only too long
    page = _post(alice, "/jobs/new/", {"tab": "yaml", "mode": "yaml", "spec": text})
    assert "Longer than 64 KiB (65536 bytes), the most a job spec may be." in _beside_spec(page)
    assert _nothing_created()


def test_switching_tabs_refuses_aliases_naming_the_spec(alice: User) -> None:
    client = Client()
    client.force_login(alice)
    answer = client.post("/jobs/new/convert/", {"to": "form", "spec": LAUGHS}).json()
    assert answer["error"]["path"] == "spec"
    assert answer["error"]["message"].startswith(REFUSED_ALIASES)


def test_the_yaml_the_page_writes_has_no_aliases_so_it_can_be_posted_back() -> None:
    shared: dict[str, Any] = {"cpu": 0.5, "memory_mb": 512}
    text = dump_yaml({"name": "x", "args": {"a": shared, "b": shared}})
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text)["args"] == {"a": shared, "b": shared}
