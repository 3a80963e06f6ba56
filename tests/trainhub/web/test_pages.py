"""The server-rendered pages: sign-in, the job list and a job's page, and who sees which job.

A user sees the jobs of the teams they belong to (a superuser sees all); another team's job
is neither listed nor shown, and its page answers 404 as if it did not exist.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user
from ..scheduling.history_driver import record_history

pytestmark = pytest.mark.django_db


def _client(user: User | None = None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def _listed(client: Client) -> set[int]:
    """The jobs the list page links to."""
    response = client.get("/jobs/")
    assert response.status_code == 200
    page = response.content.decode()
    return {job.pk for job in Job.objects.all() if f'href="/jobs/{job.pk}/"' in page}


@pytest.fixture
def teams() -> dict[str, Any]:
    """alice in recsys, bob in ads, dana in both, erin in none; one job per team."""
    alice, bob, dana, erin = (make_user(n) for n in ("alice", "bob", "dana", "erin"))
    make_team("recsys", members={alice: Role.MEMBER, dana: Role.MEMBER})
    make_team("ads", members={bob: Role.ADMIN, dana: Role.MEMBER})
    return {
        "alice": alice,
        "bob": bob,
        "dana": dana,
        "erin": erin,
        "root": make_user("root", superuser=True),
        "recsys_job": make_job(alice, team="recsys", name="recsys-mf"),
        "ads_job": make_job(bob, team="ads", name="ads-ctr"),
    }


# Signing in


def test_the_login_page_signs_a_user_in_and_sends_them_to_the_jobs() -> None:
    make_user("alice")
    client = Client()
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "alice", "password": "pw-alice"})
    assert (response.status_code, response["Location"]) == (302, "/")
    assert client.get("/").status_code == 200


def test_a_wrong_password_signs_nobody_in() -> None:
    make_user("alice")
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 200  # the form again, with its error
    page = response.content.decode()
    # The username stays as typed (escaped); the cursor goes to the password.
    assert 'name="username" autocomplete="username" required value="alice"' in page
    assert 'type="password" autocomplete="current-password" required autofocus' in page
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302


def test_signing_out_ends_the_session(teams: dict[str, Any]) -> None:
    client = _client(teams["alice"])
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


@pytest.mark.parametrize("path", ["/", "/jobs/", "/jobs/{job}/"])
def test_pages_send_a_signed_out_browser_to_the_login_page(
    teams: dict[str, Any], path: str
) -> None:
    url = path.format(job=teams["recsys_job"].pk)
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={url}"


# The team filter


def test_a_member_lists_only_their_teams_jobs(teams: dict[str, Any]) -> None:
    recsys, ads = teams["recsys_job"].pk, teams["ads_job"].pk
    assert _listed(_client(teams["alice"])) == {recsys}
    assert _listed(_client(teams["bob"])) == {ads}
    assert _listed(_client(teams["dana"])) == {recsys, ads}
    assert _listed(_client(teams["erin"])) == set()
    assert _listed(_client(teams["root"])) == {recsys, ads}


def test_the_list_names_no_other_teams_job(teams: dict[str, Any]) -> None:
    page = _client(teams["alice"]).get("/jobs/").content.decode()
    assert "recsys-mf" in page
    assert "ads-ctr" not in page


def test_a_members_job_page_shows_the_job(teams: dict[str, Any]) -> None:
    job = teams["recsys_job"]
    for who in ("alice", "dana", "root"):
        response = _client(teams[who]).get(f"/jobs/{job.pk}/")
        assert response.status_code == 200, who
        assert "recsys-mf" in response.content.decode()


def test_another_teams_job_page_is_not_found(teams: dict[str, Any]) -> None:
    ads_job = teams["ads_job"]
    for who in ("alice", "erin"):
        response = _client(teams[who]).get(f"/jobs/{ads_job.pk}/")
        assert response.status_code == 404, who
        assert "ads-ctr" not in response.content.decode()


def test_a_job_that_does_not_exist_is_not_found(teams: dict[str, Any]) -> None:
    missing = max(Job.objects.values_list("pk", flat=True)) + 1
    assert _client(teams["root"]).get(f"/jobs/{missing}/").status_code == 404


# Query counts of the pages no other module pins (every page has one, and a browser test
# that runs axe on it: tests/trainhub/web/test_every_page.py)


def test_the_login_page_makes_no_query(django_assert_num_queries: Any) -> None:
    client = Client()
    with django_assert_num_queries(0):
        assert client.get("/login/").status_code == 200
    make_user("alice")
    with django_assert_num_queries(1):  # a refused password (the user): the form again
        assert client.post("/login/", {"username": "alice", "password": "no"}).status_code == 200


@pytest.fixture
def history() -> None:
    """ann administers alpha, ben beta; a day of their jobs recorded by the platform."""
    record_history(timezone.now() - timedelta(hours=6))
    make_user("root", superuser=True)


REPLAY = {
    "days": "1",
    "quota-alpha-cpu": "8",
    "quota-alpha-memory_mb": "65536",
    "quota-alpha-gpu": "0",
    "borrow-alpha-cpu": "0",
}


def test_the_whatif_page_makes_a_fixed_number_of_queries(
    history: None, django_assert_num_queries: Any
) -> None:
    """The form, and a replay of all the history's jobs (a query per job would show here),
    for a team admin and a platform admin."""
    for who, form, replay in (("ann", 5, 12), ("root", 3, 10)):
        client = _client(User.objects.get(username=who))
        with django_assert_num_queries(form):
            assert client.get("/whatif/").status_code == 200
        with django_assert_num_queries(replay):
            response = client.get("/whatif/", REPLAY)
        assert response.status_code == 200 and "Per team" in response.content.decode(), who
