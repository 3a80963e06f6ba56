"""The what-if page in a browser: a team admin changes their team's quota, replays the
history with the keyboard alone, and reads the result in place (light and dark)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def test_a_team_admin_replays_a_bigger_quota_with_the_keyboard(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    before = live_cluster.api.get("/teams/recsys/quota/").raise_for_status().json()
    with as_person("bob") as page:
        page.goto(f"{live_cluster.url}/jobs/")
        page.get_by_role("link", name="What-if").click()
        page.wait_for_url(f"{live_cluster.url}/whatif/")
        expect(page.get_by_role("heading", name="Quota what-if")).to_be_visible()
        assert_accessible(page)
        cpu = page.locator("#id_quota-recsys-cpu")
        expect(cpu).to_have_value(f"{before['cpu']:g}")
        cpu.fill(f"{before['cpu'] * 2:g}")
        cpu.press("Enter")  # the form's submit, without the mouse
        result = page.get_by_role("region", name="Per team")
        expect(result).to_be_visible(timeout=30_000)
        expect(result).to_be_focused()
        assert "/whatif/?days=" in page.url  # a replay is a link one can share
        assert_accessible(page)
        save_screenshot(page, "whatif")

        page.locator("#id_days").fill("0")
        page.get_by_role("button", name="Replay").click()
        expect(page.locator("#id_days_error")).to_be_visible()
        expect(page.locator("#id_days")).to_be_focused()
    after = live_cluster.api.get("/teams/recsys/quota/").raise_for_status().json()
    assert after["cpu"] == before["cpu"]  # a what-if changes nothing
