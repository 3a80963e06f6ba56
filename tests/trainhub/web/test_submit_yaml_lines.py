"""The YAML tab lists every error of a refused spec with the line it is on ("line 9"
links), and hands the editor the same places to mark (`#yaml-marks`); the form tab lists
every error too. The preview's "Check" lists the YAML tab's errors with the same lines."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user

pytestmark = pytest.mark.django_db

# An unknown field (line 4) and workers.max below workers.min (line 8).
TEXT = """\
name: two-errors
team: recsys
entrypoint: ps_runtime.examples.movielens:train
foo: 1
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 512}}
workers:
  min: 3
  max: 2
  resources: {cpu: 0.5, memory_mb: 512}
coordinator: {resources: {cpu: 0.5, memory_mb: 512}}
"""


@pytest.fixture
def alice() -> User:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=4, memory_mb=8192)
    make_node(cpus=4, memory_mb=32768)
    return alice


def _post(user: User, data: dict[str, str]) -> str:
    client = Client()
    client.force_login(user)
    response = client.post("/jobs/new/", data)
    assert response.status_code == 200
    assert not Job.objects.exists()
    return response.content.decode()


def _listed(page: str) -> list[tuple[str, str, str]]:
    """(line link, path, message) of each error beside the YAML."""
    beside = page.split('id="id_spec_error"')[1].split("</div>")[0]
    found = re.findall(
        r'<li><a href="#id_spec" class="yaml-line" data-line="(\d+)" data-column="\d+">'
        r"line (\d+)</a> <code>(.*?)</code> (.*?)</li>",
        beside,
    )
    assert all(data_line == text_line for data_line, text_line, _, _ in found)
    return [(line, path, html.unescape(message)) for line, _, path, message in found]


def _marks(page: str) -> list[dict[str, Any]]:
    script = re.search(r'<script id="yaml-marks" type="application/json">(.*?)</script>', page)
    assert script, "no marks for the editor"
    return json.loads(script.group(1))


def test_an_unknown_field_and_max_below_min_are_both_listed_on_their_lines(
    alice: User,
) -> None:
    page = _post(alice, {"tab": "yaml", "mode": "yaml", "spec": TEXT})
    assert sorted(_listed(page)) == [
        ("4", "foo", "Unknown field 'foo'."),
        ("8", "workers.max", "max (2) must be at least min (3)."),
    ]
    assert sorted((m["line"], m["column"], m["path"]) for m in _marks(page)) == [
        (4, 1, "foo"),
        (8, 3, "workers.max"),
    ]
    assert "fix the 2 errors shown beside the YAML" in page


def test_a_syntax_error_is_listed_on_the_line_pyyaml_found_it(alice: User) -> None:
    text = "name: x\nteam: recsys\nworkers: {min: 1, max: [2}\n"
    page = _post(alice, {"tab": "yaml", "mode": "yaml", "spec": text})
    [(line, path, message)] = _listed(page)
    assert (line, path) == ("3", "spec")
    assert message.startswith("Not valid YAML (line 3, column 26)")
    assert [(m["line"], m["column"]) for m in _marks(page)] == [(3, 26)]


def test_a_page_without_errors_has_no_marks(alice: User) -> None:
    client = Client()
    client.force_login(alice)
    page = client.get("/jobs/new/?tab=yaml").content.decode()
    assert 'id="yaml-marks"' not in page
    assert 'class="yaml-line"' not in page
    assert 'id="id_spec_keys"' in page  # the editor's keys, which it is described by


def test_the_form_tab_lists_a_type_problem_and_max_below_min_together(alice: User) -> None:
    fields = {
        "tab": "form",
        "mode": "form",
        "name": "form-errors",
        "team": "recsys",
        "priority": "normal",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": "{}",
        "workers.min": "3",
        "workers.max": "2",
        "max_restarts": "lots",  # a JSON type problem, which used to hide the rest
    }
    page = html.unescape(_post(alice, fields))
    assert "max (2) must be at least min (3)." in page
    assert "Expected a whole number." in page
    assert "fix the 2 errors shown beside the fields" in page


def _checked(user: User, data: dict[str, str]) -> list[str]:
    """The errors the preview's "Check" lists, as text."""
    client = Client()
    client.force_login(user)
    body = client.post("/jobs/new/preview/", data).content.decode()
    assert "Not a valid spec yet" in body
    items = re.findall(r"<li>(.*?)</li>", body.split("<ul>")[1].split("</ul>")[0])
    return sorted(html.unescape(re.sub(r"</?code>", "", item)) for item in items)


def test_check_lists_each_yaml_error_with_its_line(alice: User) -> None:
    assert _checked(alice, {"tab": "yaml", "mode": "yaml", "spec": TEXT}) == [
        "line 4: foo Unknown field 'foo'.",
        "line 8: workers.max max (2) must be at least min (3).",
    ]


def test_check_lists_a_form_error_by_its_field_alone(alice: User) -> None:
    fields = {
        "tab": "form",
        "mode": "form",
        "name": "form-errors",
        "team": "recsys",
        "priority": "normal",
        "entrypoint": "ps_runtime.examples.movielens:train",
        "args": "{}",
        "workers.min": "3",
        "workers.max": "2",
    }
    assert _checked(alice, fields) == ["workers.max max (2) must be at least min (3)."]


def test_retry_and_stall_errors_are_listed_on_their_lines(alice: User) -> None:
    text = TEXT.replace("foo: 1\n", "retry: {on: [gremlins]}\nstall: {on_stall: panic}\n")
    text = text.replace("min: 3", "min: 1")
    page = _post(alice, {"tab": "yaml", "mode": "yaml", "spec": text})
    assert [(line, path) for line, path, _ in sorted(_listed(page))] == [
        ("4", "retry.on.0"),
        ("5", "stall.on_stall"),
    ]


def test_a_key_yaml_reads_as_a_boolean_is_an_unknown_field_not_a_crash(alice: User) -> None:
    page = _post(alice, {"tab": "yaml", "mode": "yaml", "spec": TEXT.replace("foo", "true")})
    assert ("True", "Unknown field 'True'.") in [(p, m) for _, p, m in _listed(page)]
