"""The teams pages in a browser: a team admin adds a member, changes their role and removes
them again, without a reload; members see the team read-only; another team is 404."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from .conftest import PASSWORD, SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def _members(live_cluster: LiveCluster) -> dict[str, str]:
    response = live_cluster.api.get("/teams/recsys/members/").raise_for_status()
    return {m["username"]: m["role"] for m in response.json()}


def test_a_team_admin_adds_changes_and_removes_a_member(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    created = live_cluster.api.post("/users/", json={"username": "dana", "password": PASSWORD})
    assert created.status_code in (201, 400), created.text  # 400: made by an earlier run
    with as_person("bob") as page:
        page.goto(f"{live_cluster.url}/teams/")
        team_link = page.get_by_role("link", name="recsys", exact=True)
        expect(team_link).to_be_visible()
        assert_accessible(page)
        save_screenshot(page, "teams")
        team_link.click()
        page.wait_for_url(f"{live_cluster.url}/teams/recsys/")

        page.get_by_label("Username").fill("dana")
        page.get_by_label("Role", exact=True).select_option("viewer")
        page.get_by_role("button", name="Add member").click()
        expect(page.locator("#member-dana")).to_be_visible()
        expect(page.locator("#members .notice")).to_have_text("dana is now a viewer.")
        assert _members(live_cluster)["dana"] == "viewer"
        assert_accessible(page)
        save_screenshot(page, "team")

        page.get_by_label("Role of dana").select_option("member")
        page.get_by_role("button", name="Change role of dana").click()
        expect(page.locator("#members .notice")).to_have_text("dana is now a member.")
        assert _members(live_cluster)["dana"] == "member"

        page.get_by_role("button", name="Remove dana…").click()
        dialog = page.get_by_role("dialog", name="Remove dana from recsys?")
        expect(dialog).to_be_visible()
        assert_accessible(page)
        dialog.get_by_role("button", name="Remove", exact=True).click()
        expect(page.locator("#member-dana")).to_have_count(0)
        assert "dana" not in _members(live_cluster)


def test_members_see_the_team_read_only_and_other_teams_not_at_all(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    with as_person("alice", dark=True) as page:
        page.goto(f"{live_cluster.url}/teams/recsys/")
        expect(page.get_by_role("heading", name="Quota and usage")).to_be_visible()
        expect(page.get_by_role("button", name="Add member")).to_have_count(0)
        expect(page.get_by_role("link", name="All jobs of recsys").first).to_have_attribute(
            "href", "/jobs/?team=recsys"
        )
        assert_accessible(page)
    with as_person("carol") as page:
        assert page.request.get(f"{live_cluster.url}/teams/recsys/").status == 404


def test_a_platform_admin_sets_the_quota_on_the_team_page(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    # The nominal quota stays as it is (other tests schedule against it); a cap changes.
    before = live_cluster.api.get("/teams/vision/quota/").raise_for_status().json()
    with as_person("admin") as page:
        page.goto(f"{live_cluster.url}/teams/vision/")
        page.get_by_text("Edit the quota").click()
        expect(page.get_by_label("CPU cores", exact=True)).to_have_value(f"{before['cpu']:g}")
        page.get_by_label("Production cap: GPUs").fill("0")
        assert_accessible(page)
        page.get_by_role("button", name="Save quota").click()
        expect(page.locator("#quota .notice")).to_contain_text("Quota saved")
    quota = live_cluster.api.get("/teams/vision/quota/").raise_for_status().json()
    assert (quota["cpu"], quota["memory_mb"]) == (before["cpu"], before["memory_mb"])
    assert quota["priority_caps"] == [
        {"priority": "production", "cpu": None, "memory_mb": None, "gpu": 0}
    ]
