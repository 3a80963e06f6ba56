"""The error pages in a browser (services mode): a member's What-if (403) and another
team's page (404) are the site's pages, with its navigation and a way on; axe finds no
serious or critical violation on them, or on the 500 page, at 1280 and 390 px, light and
dark."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from playwright.sync_api import Browser, Page, expect
from trainhub.web.errors import server_error

from ..browser import PageErrors, assert_accessible
from ..cluster import LiveCluster
from ..test_services_mode import movielens_spec
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def _assert_way_on(page: Page, heading: str) -> None:
    expect(page.get_by_role("heading", level=1)).to_have_text(heading)
    expect(page.get_by_role("navigation", name="Main")).to_be_attached()
    expect(page.get_by_role("main").get_by_role("link", name="your jobs")).to_be_visible()


def test_a_members_whatif_is_an_accessible_403_page(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    with as_person("alice") as page:
        response = page.goto(f"{live_cluster.url}/whatif/")
        assert response is not None and response.status == 403
        _assert_way_on(page, "Not allowed")
        expect(
            page.get_by_text("Only platform admins and team admins run a what-if.")
        ).to_be_visible()
        assert_accessible(page)
        page.get_by_role("main").get_by_role("link", name="your jobs").click()
        page.wait_for_url(f"{live_cluster.url}/jobs/")


def test_another_teams_job_is_an_accessible_404_page(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    """alice is not in vision: its team page and its jobs are not found, as ones that do
    not exist."""
    job = live_cluster.submit(**{**movielens_spec("vision-only", {"epochs": 1}), "team": "vision"})
    live_cluster.api.post(f"/jobs/{job['id']}/cancel/").raise_for_status()
    with as_person("alice") as page:
        response = page.goto(f"{live_cluster.url}/teams/vision/")
        assert response is not None and response.status == 404
        _assert_way_on(page, "Not found")
        assert_accessible(page)
        response = page.goto(f"{live_cluster.url}/jobs/{job['id']}/")
        assert response is not None and response.status == 404
        _assert_way_on(page, "Not found")


def test_the_500_page_is_accessible(browser: Browser, live_cluster: LiveCluster) -> None:
    """The page handler500 answers, shown at the site's address (its styles and scripts
    load from there): no view of the live server fails on purpose."""
    html = server_error(RequestFactory().get("/jobs/")).content.decode()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        errors = PageErrors(page)
        page.goto(f"{live_cluster.url}/login/")
        page.set_content(html, wait_until="load")
        expect(page).to_have_title("Server error · TrainHub")
        _assert_way_on(page, "Server error")
        assert_accessible(page)
        errors.assert_none()
    finally:
        context.close()
