"""Every page has a pinned query count and a browser test that runs axe on it (issue 28).

The pages are not listed by hand: every pattern of the web URL conf is fetched as a
platform admin, and each that answers a whole HTML document to a GET is a page. A page
missing from `CHECKS` fails here, naming what to add; so does a listed test that is gone
or no longer checks what it is listed for.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from trainhub.tenancy.choices import Role

from ..factories import make_job, make_node, make_team, make_user
from .test_experiments import make_experiment

WEB = "tests/trainhub/web"
E2E = "tests/e2e/web"


@dataclass(frozen=True)
class Checks:
    """Where a page is checked: `path::test` of each test."""

    queries: str  # pins the page's SQL query count (django_assert_num_queries)
    axe: str  # opens it in a browser and runs assert_accessible (1280 and 390 px, light, dark)


# Every page, by URL name.
CHECKS: dict[str, Checks] = {
    "login": Checks(
        f"{WEB}/test_pages.py::test_the_login_page_makes_no_query",
        f"{E2E}/test_login.py::test_the_sign_in_page_is_accessible_before_and_after_a_refusal",
    ),
    "web-dashboard": Checks(
        f"{WEB}/test_dashboard.py::test_the_dashboard_takes_a_fixed_number_of_queries",
        f"{E2E}/test_dashboard.py::test_a_member_sees_only_their_team_on_the_dashboard",
    ),
    "web-job-list": Checks(
        f"{WEB}/test_job_list.py::test_the_number_of_queries_does_not_grow_with_rows",
        f"{E2E}/test_jobs_list.py::test_a_pending_job_shows_its_reason_and_queue_position_live",
    ),
    "web-job-new": Checks(
        f"{WEB}/test_submit.py::test_the_page_makes_a_fixed_number_of_queries",
        f"{E2E}/test_submit.py::test_alice_submits_through_the_form_and_lands_on_the_job_page",
    ),
    "web-job-compare": Checks(
        f"{WEB}/test_compare.py::test_query_count_does_not_grow_with_the_jobs",
        f"{E2E}/test_compare.py::test_two_jobs_are_compared",
    ),
    "web-job-detail": Checks(
        f"{WEB}/test_job_detail.py::test_query_counts_of_the_page_and_its_fragments",
        f"{E2E}/test_job_page.py::test_a_member_watches_a_running_job_and_cancels_it",
    ),
    "web-model-list": Checks(
        f"{WEB}/test_models.py::test_the_models_page_makes_a_fixed_number_of_queries",
        f"{E2E}/test_models.py::test_a_member_opens_the_models_page_from_the_navigation",
    ),
    "web-experiment-list": Checks(
        f"{WEB}/test_experiments.py::test_page_body_and_list_take_a_fixed_number_of_queries",
        f"{E2E}/test_experiments.py::test_the_experiment_page_follows_its_trials_live",
    ),
    "web-experiment-detail": Checks(
        f"{WEB}/test_experiments.py::test_page_body_and_list_take_a_fixed_number_of_queries",
        f"{E2E}/test_experiments.py::test_the_experiment_page_follows_its_trials_live",
    ),
    "web-node-list": Checks(
        f"{WEB}/test_nodes.py::test_the_node_pages_take_a_fixed_number_of_queries",
        f"{E2E}/test_nodes.py::test_admin_cordons_drains_and_uncordons_a_node",
    ),
    "web-node-detail": Checks(
        f"{WEB}/test_nodes.py::test_the_node_pages_take_a_fixed_number_of_queries",
        f"{E2E}/test_nodes.py::test_admin_cordons_drains_and_uncordons_a_node",
    ),
    "web-team-list": Checks(
        f"{WEB}/test_teams.py::test_the_list_makes_as_many_queries_for_many_teams_as_for_two",
        f"{E2E}/test_teams.py::test_a_team_admin_adds_changes_and_removes_a_member",
    ),
    "web-team-detail": Checks(
        f"{WEB}/test_teams.py::test_the_page_makes_as_many_queries_for_many_members_as_for_two",
        f"{E2E}/test_teams.py::test_a_team_admin_adds_changes_and_removes_a_member",
    ),
    "web-user-list": Checks(
        f"{WEB}/test_onboarding.py::test_the_users_pages_make_a_fixed_number_of_queries",
        f"{E2E}/test_onboarding.py::test_a_platform_admin_onboards_a_team_and_its_first_user",
    ),
    "web-user-detail": Checks(
        f"{WEB}/test_onboarding.py::test_the_users_pages_make_a_fixed_number_of_queries",
        f"{E2E}/test_onboarding.py::test_a_platform_admin_onboards_a_team_and_its_first_user",
    ),
    "web-whatif": Checks(
        f"{WEB}/test_pages.py::test_the_whatif_page_makes_a_fixed_number_of_queries",
        f"{E2E}/test_whatif.py::test_a_team_admin_replays_a_bigger_quota_with_the_keyboard",
    ),
    "web-account": Checks(
        f"{WEB}/test_account.py::test_the_page_makes_as_many_queries_for_many_tokens_as_for_one",
        f"{E2E}/test_account.py::test_a_member_creates_and_revokes_a_token",
    ),
}

# The pages no URL pattern names: the answers of handler403, handler404 and handler500.
ERROR_PAGES: dict[str, Checks] = {
    "403": Checks(
        f"{WEB}/test_error_pages.py::test_the_403_page_pins_its_queries",
        f"{E2E}/test_error_pages.py::test_a_members_whatif_is_an_accessible_403_page",
    ),
    "404": Checks(
        f"{WEB}/test_error_pages.py::test_the_404_page_pins_its_queries",
        f"{E2E}/test_error_pages.py::test_another_teams_job_is_an_accessible_404_page",
    ),
    "500": Checks(
        f"{WEB}/test_error_pages.py::test_a_failing_page_is_a_styled_page_made_without_a_query",
        f"{E2E}/test_error_pages.py::test_the_500_page_is_accessible",
    ),
}


def _patterns(patterns: list[Any]) -> Iterator[URLPattern]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _patterns(entry.url_patterns)
        else:
            yield entry


@pytest.fixture
def kwargs(db: Any) -> dict[str, Any]:
    """A value that exists for each URL keyword of the web pages."""
    alice = make_user("alice")
    make_team("recsys", members={alice: Role.MEMBER})
    node, _ = make_node()
    return {
        "job_id": make_job(alice, team="recsys").pk,
        "experiment_id": make_experiment(alice).pk,
        "node_id": node.pk,
        "slug": "recsys",
        "username": "alice",
        "user_id": alice.pk,
        "key": "no-such-token",  # only POST views take one
        "webhook_id": 1,  # only POST views take one (notifications)
    }


def _pages(kwargs: dict[str, Any]) -> dict[str, str]:
    """Every web URL that answers GET with a whole HTML document, by name: its path."""
    client = Client()
    client.force_login(make_user("root", superuser=True))
    pages: dict[str, str] = {}
    for pattern in _patterns(get_resolver("trainhub.web.urls").url_patterns):
        name = pattern.name
        assert name, f"the web URL {pattern.pattern} has no name: name it (urls.py)"
        missing = set(pattern.pattern.converters) - set(kwargs)
        assert not missing, f"{name}: give {missing} a value that exists in kwargs() above"
        url = reverse(name, kwargs={k: kwargs[k] for k in pattern.pattern.converters})
        response = client.get(url)
        if response.status_code == 405:
            continue  # an action: POST only
        assert response.status_code == 200, (
            f"GET {url} ({name}) as a platform admin answered {response.status_code}, so this "
            "test cannot tell whether it is a page: give its URL's keywords values that "
            "exist in kwargs() above"
        )
        if response.content.lstrip().lower().startswith(b"<!doctype html"):
            pages[name] = url
    return pages


def test_every_page_has_a_pinned_query_count_and_an_axe_check(kwargs: dict[str, Any]) -> None:
    pages = _pages(kwargs)
    unchecked = [
        f"- {name} ({url}): add CHECKS[{name!r}] = Checks(<a test in {WEB}/ that GETs it "
        f"inside django_assert_num_queries(n)>, <a browser test in {E2E}/ that opens it "
        "and calls assert_accessible(page)>)"
        for name, url in pages.items()
        if name not in CHECKS
    ]
    if unchecked:
        pytest.fail(
            f"pages without a pinned query count and an axe check ({__file__}):\n"
            + "\n".join(unchecked)
        )
    stale = set(CHECKS) - set(pages)
    assert not stale, f"CHECKS lists {stale}, which are no longer pages: remove them"


def _test_source(test_id: str) -> str:
    path, _, function = test_id.partition("::")
    try:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    except ModuleNotFoundError:
        pytest.fail(f"{path} does not exist: point CHECKS at the test that checks the page")
    test = getattr(module, function, None)
    assert test is not None, f"{test_id} does not exist: point CHECKS at the test that has it"
    return inspect.getsource(test)


ALL = {**CHECKS, **ERROR_PAGES}


@pytest.mark.parametrize("page", sorted(ALL))
def test_each_listed_test_checks_what_it_is_listed_for(page: str) -> None:
    checks = ALL[page]
    assert checks.queries.startswith(f"{WEB}/") and checks.axe.startswith(f"{E2E}/")
    assert "django_assert_num_queries" in _test_source(checks.queries), (
        f"{checks.queries} pins no query count of {page} (django_assert_num_queries)"
    )
    assert "assert_accessible(" in _test_source(checks.axe), (
        f"{checks.axe} runs no axe check on {page} (assert_accessible)"
    )
