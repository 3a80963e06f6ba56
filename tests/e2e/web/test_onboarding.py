"""Onboarding a team in a browser, without the Django admin: the platform admin creates a
team and a user, adds the user to the team by e-mail (a mistyped one is refused beside
the field, which gets the focus), and the user signs in and sees the team. The users
pages and the dashboard's unassigned capacity pass axe, light and dark."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

from ..browser import assert_accessible, save_screenshot, signed_in
from ..cluster import LiveCluster
from .conftest import PASSWORD, SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def test_a_platform_admin_onboards_a_team_and_its_first_user(
    live_cluster: LiveCluster, as_person: SignedIn, browser: Browser
) -> None:
    url = live_cluster.url
    with as_person("admin") as page:
        page.goto(f"{url}/teams/")
        page.get_by_text("New team", exact=True).click()
        page.get_by_label("Slug").fill("forecast")
        page.get_by_label("Name", exact=True).fill("Forecasting")
        assert_accessible(page)
        page.get_by_role("button", name="Create team").click()
        page.wait_for_url(f"{url}/teams/forecast/")
        expect(page.locator(".notices")).to_contain_text("Team forecast created.")

        page.get_by_role("link", name="Users", exact=True).click()
        page.wait_for_url(f"{url}/users/")
        page.get_by_text("New user", exact=True).click()
        page.get_by_label("Username", exact=True).fill("erin")
        page.get_by_label("E-mail").fill("erin@example.com")
        page.get_by_label("First name").fill("Erin")
        page.get_by_label("Password", exact=True).fill(PASSWORD)
        page.get_by_label("Password", exact=True).press("Enter")  # the keyboard submits
        expect(page.locator("#users-body .notice")).to_contain_text("User erin created")
        expect(page.locator("#user-erin")).to_contain_text("erin@example.com")
        assert_accessible(page)
        save_screenshot(page, "users")

        page.get_by_role("link", name="erin", exact=True).click()
        page.wait_for_url(f"{url}/users/erin/")
        expect(page.get_by_role("heading", name="Erin erin")).to_be_visible()
        assert_accessible(page)

        page.goto(f"{url}/teams/forecast/")
        member = page.get_by_label("Username or e-mail")
        member.fill("erin@exmaple.com")  # a typo: refused beside the field, which has focus
        page.get_by_role("button", name="Add member").click()
        expect(page.locator("#id_username_error")).to_have_text("No user 'erin@exmaple.com'.")
        expect(page.get_by_label("Username or e-mail")).to_be_focused()
        page.get_by_label("Username or e-mail").fill("erin@example.com")
        page.get_by_label("Role", exact=True).select_option("admin")
        page.get_by_role("button", name="Add member").click()
        expect(page.locator("#members .notice")).to_have_text("erin is now a team admin.")
        expect(page.locator("#member-erin")).to_be_visible()
        assert_accessible(page)

        page.get_by_text("Rename forecast").click()  # a disclosure, closed at first
        page.locator("#team-rename").get_by_label("Name").fill("Demand forecasting")
        page.get_by_role("button", name="Rename team").click()
        notices = page.locator(".notices")
        expect(notices).to_contain_text("forecast is now called Demand forecasting")
        expect(page.get_by_role("heading", level=1)).to_contain_text("Demand forecasting")

    members = live_cluster.api.get("/teams/forecast/members/").raise_for_status().json()
    assert members == [{"username": "erin", "role": "admin"}]

    with signed_in(browser, url, "erin", PASSWORD, dark=True) as page:
        page.goto(f"{url}/teams/")
        expect(page.get_by_role("link", name="Forecasting")).to_be_visible()
        expect(page.locator("#teams")).to_contain_text("Team admin")
        expect(page.get_by_role("link", name="Users", exact=True)).to_have_count(0)
        assert page.request.get(f"{url}/users/").status == 403

    # The team is deactivated (no new jobs, no quota) and reactivated from its page.
    with as_person("admin") as page:
        page.goto(f"{url}/teams/forecast/")
        page.get_by_role("button", name="Deactivate forecast…").click()
        page.get_by_role("dialog").get_by_role("button", name="Deactivate").click()
        expect(page.locator(".notices")).to_contain_text("forecast is deactivated")
        assert live_cluster.api.get("/teams/forecast/").json()["is_active"] is False
        page.get_by_role("button", name="Reactivate forecast").click()
        expect(page.locator(".notices")).to_contain_text("forecast is active again")


def test_the_dashboard_shows_the_capacity_no_quota_covers(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    with as_person("admin") as page:
        page.goto(f"{live_cluster.url}/")
        part = page.locator("#unassigned")
        expect(part.get_by_role("heading", name="Unassigned capacity")).to_be_visible()
        expect(part).to_contain_text(re.compile(r"\d+(\.\d+)? CPU · .+ no team's quota covers"))
        expect(part).to_contain_text("any team may borrow it")
        assert_accessible(page)
