"""The sign-in page in a browser: axe finds nothing serious before and after a refused
password, which keeps the username and puts the cursor on the password; and the axe
check itself fails a page whose <title> is empty."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from ..browser import PageErrors, assert_accessible
from ..cluster import LiveCluster


@pytest.mark.browser
@pytest.mark.services
@pytest.mark.slow
def test_the_sign_in_page_is_accessible_before_and_after_a_refusal(
    browser: Browser, live_cluster: LiveCluster
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        errors = PageErrors(page)
        page.goto(f"{live_cluster.url}/login/")
        expect(page).to_have_title("Sign in · TrainHub")
        assert_accessible(page)
        page.get_by_label("Username").fill("nobody")
        page.get_by_label("Password").fill("wrong-password")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_text("Wrong username or password")).to_be_visible()
        # The username stays as typed and the cursor waits in the password field.
        expect(page.get_by_label("Username")).to_have_value("nobody")
        expect(page.get_by_label("Password")).to_be_focused()
        expect(page.get_by_label("Password")).to_have_value("")
        assert_accessible(page)
        errors.assert_none()
    finally:
        context.close()


PAGE = (
    '<!doctype html><html lang="en"><head><title>{}</title></head>'
    "<body><main><h1>A page</h1></main></body></html>"
)


@pytest.mark.browser
def test_an_empty_title_fails_the_axe_check(browser: Browser) -> None:
    page = browser.new_page()
    try:
        page.set_content(PAGE.format("A page"))
        assert_accessible(page)  # the same page with a title passes
        page.set_content(PAGE.format(""))
        with pytest.raises(AssertionError, match="document-title"):
            assert_accessible(page)
    finally:
        page.close()
