"""`/jobs/`: filtered as the API filters, paginated, an htmx table fragment, queue positions
and reasons of pending jobs, and a fixed number of queries however many rows it shows."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.scheduling.queue import queue_positions
from trainhub.telemetry.services import write_points
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db

FRAGMENT = {"HX-Request": "true"}


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _listed(client: Client, query: str = "") -> list[int]:
    """The job ids the table lists, in order."""
    response = client.get(f"/jobs/{query}")
    assert response.status_code == 200
    return [int(i) for i in re.findall(r'<tr data-job-id="(\d+)"', response.content.decode())]


@pytest.fixture
def world() -> dict[str, Any]:
    """alice in recsys, bob in recsys and ads, carol in vision; a few jobs each."""
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    make_team("recsys", members={alice: Role.MEMBER, bob: Role.ADMIN})
    make_team("ads", members={bob: Role.MEMBER})
    make_team("vision", members={carol: Role.MEMBER})
    make_job(alice, name="mf-small")
    make_job(alice, name="mf-large", priority="production")
    make_job(bob, name="ctr-wide", team="ads", priority="experiment")
    make_job(bob, name="mf-bob")
    make_job(carol, name="resnet", team="vision")
    Job.objects.filter(name="mf-large").update(state=JobState.RUNNING)
    return {"alice": alice, "bob": bob, "carol": carol}


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?team=recsys",
        "?team=ads",
        "?state=pending",
        "?state=running",
        "?state=pending&state=running",
        "?priority=production",
        "?name=mf",
        "?name=MF-B",
        "?submitted_by=alice",
        "?team=recsys&submitted_by=bob",
        "?team=vision",
    ],
)
def test_the_list_filters_as_the_api_does(world: dict[str, Any], query: str) -> None:
    api = APIClient()
    api.force_authenticate(world["bob"])
    expected = [job["id"] for job in api.get(f"/api/v1/jobs/{query}").json()["results"]]
    assert _listed(_client(world["bob"]), query) == expected


def test_a_member_sees_only_their_teams_jobs_and_teams(world: dict[str, Any]) -> None:
    page = _client(world["alice"]).get("/jobs/").content.decode()
    assert "mf-small" in page and "ctr-wide" not in page and "resnet" not in page
    options = _options(page, 'id="filter-team"')
    assert options == ["recsys"]


def test_an_invalid_filter_lists_nothing_and_says_why(world: dict[str, Any]) -> None:
    response = _client(world["bob"]).get("/jobs/?state=sleeping")
    page = response.content.decode()
    assert response.status_code == 200
    assert _listed(_client(world["bob"]), "?state=sleeping") == []
    assert 'id="filter-state-error"' in page
    assert "sleeping is not one of the available choices" in page


def test_pending_jobs_show_their_queue_position_and_reason(world: dict[str, Any]) -> None:
    Job.objects.filter(name="mf-small").update(pending_reason="team quota exhausted: cpu 2/2")
    small = Job.objects.get(name="mf-small")
    position = queue_positions([small.pk])[small.pk]
    page = _client(world["alice"]).get("/jobs/").content.decode()
    row = page.split(f'<tr data-job-id="{small.pk}"')[1].split("</tr>")[0]
    assert f"#{position} in queue" in row
    assert "team quota exhausted: cpu 2/2" in row
    running = page.split(f'<tr data-job-id="{Job.objects.get(name="mf-large").pk}"')[1]
    assert "in queue" not in running.split("</tr>")[0]


def test_an_htmx_request_gets_only_the_table(world: dict[str, Any]) -> None:
    client = _client(world["bob"])
    response = client.get("/jobs/?team=ads", headers=FRAGMENT)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="job-table"')
    assert "<html" not in body and 'id="job-filters"' not in body
    # It refreshes itself with the same filters, only while the page is visible.
    assert 'hx-get="/jobs/?team=ads"' in body
    assert "every 4s [document.visibilityState === 'visible']" in body
    full = client.get("/jobs/?team=ads").content.decode()
    assert 'id="job-filters"' in full and 'hx-push-url="true"' in full


def test_pages_of_50_whose_links_keep_the_filters(world: dict[str, Any]) -> None:
    alice = world["alice"]
    for i in range(53):
        make_job(alice, name=f"bulk-{i}")
    client = _client(alice)
    first = client.get("/jobs/?state=pending&team=recsys").content.decode()
    assert len(re.findall(r"<tr data-job-id=", first)) == 50
    assert 'href="?state=pending&amp;team=recsys&amp;page=2"' in first
    second = _listed(client, "?state=pending&team=recsys&page=2")
    assert len(second) == 2 + 53 - 50  # mf-small, mf-bob and the last of the bulk
    assert _listed(client, "?state=pending&team=recsys&page=99") == second  # the last page


def test_checkboxes_pick_jobs_for_comparison(world: dict[str, Any]) -> None:
    page = _client(world["alice"]).get("/jobs/").content.decode()
    assert 'id="compare-form"' in page and 'action="/jobs/compare/"' in page
    small = Job.objects.get(name="mf-small").pk
    assert f'<input type="checkbox" class="compare-pick" id="pick-{small}"' in page
    assert f'aria-label="Compare mf-small (#{small})"' in page


def test_the_number_of_queries_does_not_grow_with_rows(
    world: dict[str, Any], django_assert_num_queries: Any
) -> None:
    """session, user, navigation, the filter's teams, count, rows, queue positions."""
    client = _client(world["bob"])
    with django_assert_num_queries(7):
        assert client.get("/jobs/").status_code == 200
    for i in range(30):
        make_job(world["bob"], name=f"more-{i}", team="ads" if i % 2 else "recsys")
    with django_assert_num_queries(7):
        assert client.get("/jobs/").status_code == 200
    with django_assert_num_queries(6):  # the fragment has no filter form
        assert client.get("/jobs/?state=pending", headers=FRAGMENT).status_code == 200


def test_a_page_without_pending_jobs_skips_the_queue(
    world: dict[str, Any], django_assert_num_queries: Any
) -> None:
    client = _client(world["bob"])
    with django_assert_num_queries(5):
        assert client.get("/jobs/?state=running", headers=FRAGMENT).status_code == 200


def _options(page: str, select: str) -> list[str]:
    """The values a <select> offers."""
    return re.findall(r'<option value="([\w-]+)"', page.split(select)[1].split("</select>")[0])


def test_chosen_metrics_and_run_times_are_columns(
    world: dict[str, Any], django_assert_num_queries: Any
) -> None:
    """`?metrics=a,b`: each listed job's final value of those metrics, in one more query;
    every job its run time."""
    small, large = Job.objects.get(name="mf-small"), Job.objects.get(name="mf-large")
    now = timezone.now()
    Job.objects.filter(pk=large.pk).update(
        started_at=now - timedelta(minutes=4, seconds=10), finished_at=now
    )
    for job, name, step, value in (
        (small, "test_rmse", 1, 1.2),
        (small, "test_rmse", 2, 0.9321),
        (large, "test_rmse", 5, 0.8877),
        (large, "auc", 5, 0.81),
    ):
        write_points(job.pk, [(name, step, value)], time=now)
    client = _client(world["alice"])
    with django_assert_num_queries(7):  # the fragment's 6, and the finals
        page = client.get("/jobs/?metrics=test_rmse,auc", headers=FRAGMENT).content.decode()
    header = re.findall(r'<th scope="col" class="metric-column"><code>([^<]+)</code>', page)
    assert header == ["test_rmse", "auc"]

    def cells(job: Job) -> list[str]:
        row = re.search(rf'<tr data-job-id="{job.pk}".*?</tr>', page, re.S)
        assert row
        return [
            *re.findall(r'<td class="duration">([^<]*)</td>', row[0]),
            *re.findall(r'<td class="metric-value">([^<]*)</td>', row[0]),
        ]

    assert cells(small) == ["—", "0.9321", "—"]  # never started; no auc
    assert cells(large) == ["4 min 10 s", "0.8877", "0.81"]


@pytest.mark.parametrize(
    ("metrics", "says"),
    [("a,b,c,d,e,f", "at most 5 metrics"), ("rmse;drop", "is not a metric name")],
)
def test_bad_metric_columns_say_what_to_fix_and_list_the_jobs(
    world: dict[str, Any], metrics: str, says: str
) -> None:
    page = _client(world["alice"]).get(f"/jobs/?metrics={metrics}").content.decode()
    assert 'id="metrics-error"' in page and says in page
    assert 'class="metric-column"' not in page
    assert len(re.findall(r'<tr data-job-id="', page)) == 3  # alice's team's jobs all listed
