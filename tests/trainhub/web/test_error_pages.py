"""The error pages (`trainhub.web.errors`): a refused, missing or failed page answers a page
with the site's navigation that says what happened and where to go, not Django's bare
"403 Forbidden"; paths under /api/ keep answering JSON; a refusal logs one line.

This module is also the URL conf of the 500 tests: the site's patterns and handlers, and
a view that fails.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from django.urls import path
from trainhub import urls as site_urls
from trainhub.tenancy.choices import Role
from trainhub.web import errors

from ..factories import make_job, make_team, make_user

pytestmark = pytest.mark.django_db


def _fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug in a view")


urlpatterns = [path("fail/", _fail), path("api/v1/fail/", _fail), *site_urls.urlpatterns]
handler403 = site_urls.handler403
handler404 = site_urls.handler404
handler500 = site_urls.handler500

NAV = re.compile(r'<nav [^>]*aria-label="Main"')
STYLES = "trainhub/app.css"


def _client(user: User | None = None) -> Client:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def people() -> dict[str, Any]:
    """alice a member of recsys, bob the admin of ads with one job."""
    alice, bob = make_user("alice"), make_user("bob")
    make_team("recsys", members={alice: Role.MEMBER})
    make_team("ads", members={bob: Role.ADMIN})
    return {"alice": alice, "bob": bob, "ads_job": make_job(bob, team="ads", name="ads-ctr")}


def _assert_site_page(page: str, title: str) -> None:
    """The page is the site's: its styles, its navigation, a title and one heading."""
    assert STYLES in page, "the error page is not styled"
    assert NAV.search(page) and "Skip to content" in page, "the error page has no navigation"
    assert f"<title>{title} · TrainHub</title>" in page
    assert page.count("<h1") == 1


# 403


def test_a_members_whatif_is_a_styled_page_saying_why_and_where_to_go(
    people: dict[str, Any],
) -> None:
    response = _client(people["alice"]).get("/whatif/")
    assert response.status_code == 403
    page = response.content.decode()
    _assert_site_page(page, "Not allowed")
    assert "Only platform admins and team admins run a what-if." in page  # the view's reason
    assert 'href="/jobs/"' in page and 'href="/teams/"' in page  # where to go
    assert "Sign out alice" in page  # the signed-in navigation, as on every page


def test_a_refusal_logs_one_line_without_a_traceback(
    people: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert _client(people["alice"]).get("/whatif/").status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert [r.getMessage() for r in records] == ["Forbidden (Permission denied): /whatif/"]
    assert records[0].exc_info is None and "Traceback" not in caplog.text


def test_a_server_error_keeps_its_traceback_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    filtered = logging.LogRecord("django.request", logging.ERROR, "", 0, "boom", (), None)
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        filtered.exc_info = (RuntimeError, exc, exc.__traceback__)
    filtered.status_code = 500
    assert errors.OneLineClientErrors().filter(filtered)
    assert filtered.exc_info is not None


def test_the_403_page_without_a_reason_says_so_in_general() -> None:
    request = RequestFactory().get("/nodes/1/cordon/")
    request.user = make_user("carol")
    page = errors.forbidden(request, PermissionDenied()).content.decode()
    assert errors.FORBIDDEN in page


def test_the_403_page_pins_its_queries(
    people: dict[str, Any], django_assert_num_queries: Any
) -> None:
    client = _client(people["alice"])
    # session, user, the what-if's quotas, memberships; the navigation's roles
    with django_assert_num_queries(5):
        assert client.get("/whatif/").status_code == 403


# 404


def test_another_teams_job_is_a_styled_not_found_page(people: dict[str, Any]) -> None:
    response = _client(people["alice"]).get(f"/jobs/{people['ads_job'].pk}/")
    assert response.status_code == 404
    page = response.content.decode()
    _assert_site_page(page, "Not found")
    assert "ads-ctr" not in page
    assert "a team you are not in" in page and 'href="/jobs/"' in page


def test_an_unknown_path_signed_out_offers_the_sign_in() -> None:
    response = _client().get("/no-such-page/")
    assert response.status_code == 404
    page = response.content.decode()
    _assert_site_page(page, "Not found")
    assert 'href="/login/"' in page


def test_the_404_page_pins_its_queries(
    people: dict[str, Any], django_assert_num_queries: Any
) -> None:
    client = _client(people["alice"])
    # session, user, the job; the navigation's roles
    with django_assert_num_queries(4):
        assert client.get(f"/jobs/{people['ads_job'].pk}/").status_code == 404


# 500


@pytest.mark.urls(__name__)
def test_a_failing_page_is_a_styled_page_made_without_a_query(
    people: dict[str, Any], django_assert_num_queries: Any
) -> None:
    client = _client(people["alice"])
    with django_assert_num_queries(0):  # the database may be what failed
        response = client.get("/fail/")
    assert response.status_code == 500
    page = response.content.decode()
    _assert_site_page(page, "Server error")
    assert 'href="/jobs/"' in page and "a bug in a view" not in page


def test_the_500_page_renders_with_no_request_context() -> None:
    response = errors.server_error(RequestFactory().get("/jobs/"))
    assert response.status_code == 500
    _assert_site_page(response.content.decode(), "Server error")


# The API keeps answering JSON


@pytest.mark.urls(__name__)
def test_the_api_answers_json_errors(people: dict[str, Any]) -> None:
    client = _client(people["alice"])
    missing = client.get("/api/v1/no-such-thing/")
    assert (missing.status_code, missing["Content-Type"]) == (404, "application/json")
    assert missing.json() == {"detail": "Not found."}
    failed = client.get("/api/v1/fail/")
    assert (failed.status_code, failed.json()) == (500, {"detail": "Server error."})
    refused = errors.forbidden(RequestFactory().get("/api/v1/x/"), PermissionDenied("No."))
    assert (refused.status_code, refused["Content-Type"]) == (403, "application/json")
    assert refused.content == b'{"detail": "No."}'
