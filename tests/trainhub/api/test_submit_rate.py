"""Submitting and cloning jobs are rate limited per user (`TRAINHUB_SUBMIT_RATE`, 60 a
minute unless set): over the rate the API answers 429 with `Retry-After` and creates
nothing; other users are not held back. A bad rate stops every process at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient
from trainhub.api.throttles import SubmissionRateThrottle
from trainhub.jobs.models import Job, JobEvent
from trainhub.tenancy.choices import Role

from ..factories import make_node, make_team, make_user, spec

pytestmark = pytest.mark.django_db

DEFAULT = 60  # TRAINHUB_SUBMIT_RATE's default: 60/minute
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def alice() -> User:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER}, cpu=64, memory_mb=65536)
    make_node(cpus=2, memory_mb=32768)
    return alice


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _counts() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


@pytest.fixture
def three_a_minute(monkeypatch: pytest.MonkeyPatch) -> int:
    """A lower rate, for tests that are not about the default."""
    monkeypatch.setattr(SubmissionRateThrottle, "rate", "3/minute", raising=False)
    return 3


def _use_up(client: APIClient, rate: int) -> None:
    for i in range(rate):
        response = client.post("/api/v1/jobs/", spec(name=f"j{i}"), format="json")
        assert response.status_code == 201, (i, response.content)


def _assert_throttled(response: Any) -> None:
    assert response.status_code == 429, response.content
    assert 0 < int(response["Retry-After"]) <= 60
    assert "Request was throttled" in response.json()["detail"]


def test_submissions_over_the_default_rate_are_refused_and_create_nothing(alice: User) -> None:
    client = _client(alice)
    _use_up(client, DEFAULT)
    before = _counts()
    _assert_throttled(client.post("/api/v1/jobs/", spec(name="one-more"), format="json"))
    _assert_throttled(client.post("/api/v1/jobs/?dry_run=true", spec(), format="json"))
    assert _counts() == before
    assert client.get("/api/v1/jobs/").status_code == 200  # reading is not submitting


def test_clones_count_as_submissions(alice: User, three_a_minute: int) -> None:
    client = _client(alice)
    _use_up(client, three_a_minute)
    first = Job.objects.order_by("pk").first()
    assert first is not None
    before = _counts()
    _assert_throttled(client.post(f"/api/v1/jobs/{first.pk}/clone/", {}, format="json"))
    assert _counts() == before


def test_a_clone_uses_the_budget_a_submission_would(alice: User, three_a_minute: int) -> None:
    client = _client(alice)
    job = client.post("/api/v1/jobs/", spec(name="original"), format="json").json()
    for i in range(three_a_minute - 1):
        cloned = client.post(f"/api/v1/jobs/{job['id']}/clone/", {"name": f"c{i}"}, format="json")
        assert cloned.status_code == 201, cloned.content
    _assert_throttled(client.post("/api/v1/jobs/", spec(name="late"), format="json"))


def test_another_user_is_not_held_back(alice: User, three_a_minute: int) -> None:
    bob = make_user("bob")
    make_team("ads", members={bob: Role.MEMBER}, cpu=64, memory_mb=65536)
    _use_up(_client(alice), three_a_minute)
    response = _client(bob).post("/api/v1/jobs/", spec(team="ads"), format="json")
    assert response.status_code == 201, response.content


def test_the_schema_documents_the_429() -> None:
    admin = _client(make_user("root", superuser=True))
    schema = admin.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    jobs = schema["paths"]["/api/v1/jobs/"]
    assert "429" in jobs["post"]["responses"]
    assert "429" in schema["paths"]["/api/v1/jobs/{id}/clone/"]["post"]["responses"]
    assert "429" not in jobs["get"]["responses"]


def _load_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Import the settings in a fresh interpreter, as every TrainHub process does first."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import trainhub.settings as s; print(s.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'])",
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.endswith("_RATE")},
            "PYTHONPATH": os.pathsep.join([str(REPO / "platform"), str(REPO)]),
            "TRAINHUB_DATA_DIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TRAINHUB_SUBMIT_RATE", "60"),
        ("TRAINHUB_SUBMIT_RATE", "60/fortnight"),
        ("TRAINHUB_SUBMIT_RATE", "0/minute"),
        ("TRAINHUB_AUTH_RATE", "lots/minute"),
    ],
)
def test_a_bad_rate_is_named_at_start(tmp_path: Path, name: str, value: str) -> None:
    done = _load_settings(tmp_path, **{name: value})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert f"{name}={value!r}: use requests per second, minute, hour or day" in done.stderr


def test_rates_default_and_can_be_set(tmp_path: Path) -> None:
    assert _load_settings(tmp_path).stdout.strip() == "{'auth': '30/minute', 'submit': '60/minute'}"
    done = _load_settings(tmp_path, TRAINHUB_SUBMIT_RATE="600/hour", TRAINHUB_AUTH_RATE="5/m")
    assert done.stdout.strip() == "{'auth': '5/m', 'submit': '600/hour'}", done.stderr
