"""A stalled job says so where a job is shown: its page (a `stalled` badge beside the
state), the API (`stalled_at`) and `trainhub describe`."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient
from trainhub.cli import client as cli
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user, running_job

pytestmark = pytest.mark.django_db

STALLED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def job() -> Job:
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, _ = make_node()
    return running_job(make_job(alice), node)


def _page(job: Job) -> str:
    client = Client()
    client.force_login(job.submitted_by)  # type: ignore[arg-type]
    response = client.get(f"/jobs/{job.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_job_page_shows_a_running_stalled_job_as_stalled(job: Job) -> None:
    assert 'id="job-stalled"' not in _page(job)
    Job.objects.filter(pk=job.pk).update(stalled_at=STALLED)
    page = _page(job)
    assert (
        '<span id="job-stalled" class="state state-stalled" '
        'title="no progress since 2026-03-01T12:00:00+00:00">stalled</span>'
    ) in page
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED)  # ended stalled: its state says
    assert 'id="job-stalled"' not in _page(job)


def test_the_api_answers_stalled_at(job: Job) -> None:
    api = APIClient()
    api.force_authenticate(job.submitted_by)
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["stalled_at"] is None
    Job.objects.filter(pk=job.pk).update(stalled_at=STALLED)
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["stalled_at"] == "2026-03-01T12:00:00Z"


def test_describe_says_since_when_a_running_job_is_stalled(
    job: Job, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = APIClient()
    api.force_authenticate(job.submitted_by)
    Job.objects.filter(pk=job.pk).update(stalled_at=STALLED)

    class Api:
        def get(self, path: str) -> Any:
            return api.get(f"/api/v1{path}").json()

    monkeypatch.setattr(cli, "signed_in", Api)
    cli.describe(argparse.Namespace(job=job.pk, json=False))
    shown = capsys.readouterr().out
    assert "  state:      running\n  stalled:    since 2026-03-01T12:00:00Z" in shown
