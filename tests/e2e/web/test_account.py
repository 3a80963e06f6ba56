"""The account page in a browser: a token made with a name (its secret shown once, with a
copy button) works against the API and is listed by its name; revoked (after a
confirmation naming it), it stops working at once and the page says which went."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def _me(live_cluster: LiveCluster, secret: str) -> int:
    headers = {"Authorization": f"Token {secret}"}
    return httpx.get(f"{live_cluster.url}/api/v1/users/me/", headers=headers).status_code


def test_a_member_creates_and_revokes_a_token(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/account/")
        expect(page.locator("#cli-login")).to_have_text(
            f"trainhub login {live_cluster.url} --username alice"
        )
        assert_accessible(page)
        # Without a name the form says what to do beside the field.
        page.get_by_role("button", name="Create token").click()
        expect(page.locator("#id_name_error")).to_have_text(
            "Give the token a name that says what uses it, e.g. “laptop CLI”."
        )
        # The focus moves to the field in error (a moment after the swap, when htmx settles).
        expect(page.get_by_label("Name")).to_be_focused()
        page.get_by_label("Name").fill("laptop CLI")
        page.get_by_label("Expires in (days)").fill("30")
        page.get_by_role("button", name="Create token").click()
        expect(page.locator(".new-token h3")).to_have_text("New token “laptop CLI”")
        secret = page.locator("#token-secret").inner_text()
        row = page.get_by_role("row").filter(has=page.get_by_role("rowheader", name="laptop CLI"))
        expect(row).to_have_count(1)
        key = row.locator("code").inner_text().removesuffix("…")
        assert secret.startswith(key)
        expect(page.locator("#tokens thead th").first).to_have_text("Name")
        expect(page.locator("#token-login")).to_have_text(
            f"trainhub login {live_cluster.url} --token {secret}"
        )
        assert _me(live_cluster, secret) == 200
        page.get_by_role("button", name="Copy token").click()
        expect(page.locator("#tokens .copy-status")).to_have_text(re.compile("Copied|Selected"))
        assert_accessible(page)
        save_screenshot(page, "account")

        page.reload()
        expect(page.locator(f"#token-{key}")).to_be_visible()
        assert secret not in page.content()  # shown once

        expect(page.get_by_role("rowheader", name="laptop CLI")).to_be_visible()
        page.get_by_role("button", name="Revoke token “laptop CLI”…").click()
        dialog = page.get_by_role("dialog", name="Revoke token “laptop CLI”?")
        expect(dialog).to_be_visible()
        dialog.get_by_role("button", name="Revoke", exact=True).click()
        expect(page.locator(f"#token-{key}")).to_have_count(0)
        expect(page.locator("#tokens .notice")).to_have_text(
            "Token “laptop CLI” revoked: it no longer works."
        )
        assert _me(live_cluster, secret) == 401
