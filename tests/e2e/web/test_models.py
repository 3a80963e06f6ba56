"""The Models page in a browser: reached from the navigation with the keyboard, accessible
in light and dark colours, empty until a version is registered."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ..browser import assert_accessible
from ..cluster import LiveCluster
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def test_a_member_opens_the_models_page_from_the_navigation(
    live_cluster: LiveCluster, as_person: SignedIn
) -> None:
    with as_person("carol") as page:
        page.goto(f"{live_cluster.url}/")
        link = page.get_by_role("navigation", name="Main").get_by_role("link", name="Models")
        link.focus()
        page.keyboard.press("Enter")
        expect(page).to_have_url(f"{live_cluster.url}/models/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Models")
        expect(page.locator("table.models tbody")).to_contain_text("No model is registered yet")
        assert_accessible(page)
