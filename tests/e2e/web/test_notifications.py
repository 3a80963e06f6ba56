"""Notifications on the account page in a browser, with the keyboard: a member chooses
what she is told about (kept after a reload, as the API reads it), a private webhook URL
is refused beside its field, a public one is added with its secret shown once, and
deleted after a confirmation."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from ..browser import assert_accessible
from ..cluster import LiveCluster
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def test_a_member_chooses_her_notifications_and_adds_a_webhook(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/account/")
        section = page.locator("#notifications")
        expect(section.get_by_label("Job failed (with its cause)")).to_be_checked()
        expect(section.get_by_label("Job succeeded")).not_to_be_checked()
        assert_accessible(page)

        # Space toggles a focused checkbox; Enter on the focused button saves.
        section.get_by_label("Job succeeded").focus()
        page.keyboard.press("Space")
        section.get_by_label("Job stalled").focus()
        page.keyboard.press("Space")
        section.get_by_role("button", name="Save notifications").focus()
        page.keyboard.press("Enter")
        expect(page.locator("#notifications .notice")).to_have_text("Notifications saved.")
        expect(page.locator("#notifications .notice")).to_be_focused()
        mine = page.request.get(f"{live_cluster.url}/api/v1/users/me/notifications/").json()
        assert mine["events"] == ["job.failed", "job.succeeded"]
        page.reload()
        expect(section.get_by_label("Job succeeded")).to_be_checked()
        expect(section.get_by_label("Job stalled")).not_to_be_checked()

        # A loopback URL is refused beside the field, which gets the focus.
        section.get_by_label("URL").fill("http://127.0.0.1:9/hook")
        section.get_by_role("button", name="Add webhook").click()
        expect(page.locator("#id_url_error")).to_contain_text("private, loopback or link-local")
        expect(section.get_by_label("URL")).to_be_focused()
        section.get_by_label("URL").fill("https://hooks.example.com/trainhub")
        section.get_by_label("Format").select_option("slack")
        section.get_by_label("URL").press("Enter")
        new = section.locator(".new-token")
        expect(new.locator("h3")).to_have_text(re.compile(r"New webhook \d+"))
        secret = page.locator("#webhook-secret").inner_text()
        assert re.fullmatch(r"[0-9a-f]{64}", secret)
        number = new.locator("h3").inner_text().rsplit(" ", 1)[1]
        row = page.locator(f"#webhook-{number}")
        expect(row).to_contain_text("https://hooks.example.com/trainhub")
        expect(row).to_contain_text("Slack-compatible")
        assert_accessible(page)

        page.reload()
        assert secret not in page.content()  # shown once
        page.get_by_role("button", name=f"Delete webhook {number}…").click()
        dialog = page.get_by_role("dialog", name=f"Delete webhook {number}?")
        expect(dialog).to_be_visible()
        dialog.get_by_role("button", name="Delete", exact=True).click()
        expect(page.locator(f"#webhook-{number}")).to_have_count(0)
        expect(page.locator("#notifications .notice")).to_have_text(
            "Webhook deleted with its delivery log."
        )
