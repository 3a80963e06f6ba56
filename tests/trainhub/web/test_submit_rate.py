"""The submit page counts into the same per-user submission rate as the API
(`TRAINHUB_SUBMIT_RATE`): over it the page answers 429 with `Retry-After`, keeps what
was typed, says why, and creates nothing."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle
from trainhub.jobs.models import Job, JobEvent
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db

YAML = """\
name: small
team: recsys
entrypoint: ps_runtime.examples.movielens:train
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 512}}
workers: {min: 1, max: 1, resources: {cpu: 0.5, memory_mb: 512}}
coordinator: {resources: {cpu: 0.5, memory_mb: 512}}
"""


@pytest.fixture(autouse=True)
def _two_a_minute(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A low rate, and no counts from other tests."""
    monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, "submit", "2/minute")
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def alice() -> User:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=64, memory_mb=65536)
    make_node(cpus=2, memory_mb=32768)
    return alice


def _page(alice: User) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def _counts() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


def test_over_the_rate_the_page_refuses_keeps_the_yaml_and_creates_nothing(alice: User) -> None:
    client = _page(alice)
    post = {"tab": "yaml", "mode": "yaml", "spec": YAML}
    assert [client.post("/jobs/new/", post).status_code for _ in range(2)] == [302, 302]
    before = _counts()
    refused = client.post("/jobs/new/", post)
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    page = html.unescape(refused.content.decode())
    assert "Too many submissions: try again in" in page
    assert YAML.strip() in page
    assert _counts() == before


def test_the_form_tab_says_it_on_top(alice: User) -> None:
    client = _page(alice)
    form = {"tab": "form", "mode": "form", "name": "typed-name", "team": "recsys"}
    for _ in range(2):
        client.post("/jobs/new/", form)
    refused = client.post("/jobs/new/", form)
    assert refused.status_code == 429
    page = refused.content.decode()
    assert '<div class="form-errors" role="alert"><p>Too many submissions' in page
    assert 'value="typed-name"' in page


def test_the_page_and_the_api_share_one_budget(alice: User) -> None:
    api = APIClient()
    api.force_authenticate(alice)
    for i in range(2):
        assert api.post("/api/v1/jobs/", spec(name=f"a{i}"), format="json").status_code == 201
    before = _counts()
    post = {"tab": "yaml", "mode": "yaml", "spec": YAML}
    assert _page(alice).post("/jobs/new/", post).status_code == 429
    assert _counts() == before


def test_reading_the_page_is_not_a_submission(alice: User) -> None:
    client = _page(alice)
    for _ in range(5):
        assert client.get("/jobs/new/").status_code == 200
    assert (
        client.post("/jobs/new/", {"tab": "yaml", "mode": "yaml", "spec": YAML}).status_code == 302
    )
