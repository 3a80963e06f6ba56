"""The what-if page: team admins replay their own teams' quotas (the others pooled),
platform admins every team's; bad input is named beside its field; nothing changes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from trainhub.jobs.models import Job
from trainhub.tenancy.models import Quota

from ..factories import make_user
from ..scheduling.history_driver import PLAN, record_history

URL = "/whatif/"


@pytest.fixture
def world(db: Any) -> None:
    record_history(timezone.now() - timedelta(hours=6))  # ann administers alpha, ben beta
    make_user("root", superuser=True)


def _as(username: str) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def test_the_form_is_prefilled_with_the_quotas_the_user_may_change(world: None) -> None:
    page = _as("ann").get(URL).content.decode()
    assert 'name="quota-alpha-cpu"' in page and 'value="5"' in page
    assert "quota-beta-cpu" not in page
    assert "Per team" not in page  # nothing replayed before the form is sent
    root = _as("root").get(URL).content.decode()
    assert "quota-alpha-cpu" in root and "quota-beta-cpu" in root


def test_a_replay_shows_each_team_beside_its_history(world: None) -> None:
    fields = {
        "days": "1",
        "quota-alpha-cpu": "8",
        "quota-alpha-memory_mb": "65536",
        "quota-alpha-gpu": "0",
        "borrow-alpha-cpu": "0",
    }
    response = _as("ann").get(URL, fields)
    assert response.status_code == 200
    page = response.content.decode()
    assert f"{len(PLAN)} jobs submitted" in page
    assert "Per team" in page and "(other teams)" in page
    assert "(better)" in page  # alpha waits less with 8 CPUs
    assert Quota.objects.get(team__slug="alpha").cpu == 5  # nothing changed


def test_htmx_gets_the_fragment_only(world: None) -> None:
    response = _as("root").get(URL, {"days": "1"}, HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert page.lstrip().startswith('<section id="whatif"') and "<html" not in page


def test_bad_input_is_named_and_nothing_runs(world: None) -> None:
    response = _as("root").get(URL, {"days": "0", "quota-alpha-cpu": "-1"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="id_days_error"' in page and 'id="id_quota-alpha-cpu_error"' in page
    assert "Per team" not in page
    assert Job.objects.count() == len(PLAN)


def test_members_who_administer_nothing_are_refused(world: None) -> None:
    make_user("mia")
    assert _as("mia").get(URL).status_code == 403
    assert "What-if" not in _as("mia").get("/jobs/").content.decode()
    assert 'href="/whatif/"' in _as("ann").get("/jobs/").content.decode()


def test_days_without_jobs_say_so(world: None) -> None:
    page = _as("root").get(URL, {"days": "0.01"}).content.decode()
    assert "No job ran in these days" in page and "Completion time" not in page


def test_a_link_that_names_only_the_days_replays_todays_settings(world: None) -> None:
    response = _as("root").get(URL, {"days": "1"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "(better)" not in page and "(worse)" not in page  # nothing changed: no change
