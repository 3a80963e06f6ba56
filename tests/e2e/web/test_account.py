"""The account page in a browser: a token made (its secret shown once, with a copy button)
works against the API; revoked (after a confirmation), it stops working at once."""

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
        page.get_by_label("Expires in (days)").fill("30")
        page.get_by_role("button", name="Create token").click()
        secret = page.locator("#token-secret").inner_text()
        key = page.locator(".new-token h3").inner_text().removeprefix("New token ")
        assert secret.startswith(key)
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

        page.get_by_role("button", name=f"Revoke token {key}…").click()
        dialog = page.get_by_role("dialog", name=f"Revoke token {key}?")
        expect(dialog).to_be_visible()
        dialog.get_by_role("button", name="Revoke", exact=True).click()
        expect(page.locator(f"#token-{key}")).to_have_count(0)
        expect(page.locator("#tokens .notice")).to_contain_text(f"Token {key} revoked")
        assert _me(live_cluster, secret) == 401
