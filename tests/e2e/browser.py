"""Driving Debian's headless Chromium with Playwright: launching it, signing in, and the
checks every page must pass (no JavaScript error; no serious or critical axe violation,
at 1280 and 390 px, light and dark)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Response

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "frontend" / "node_modules" / "axe-core" / "axe.min.js"
# README screenshots come from the tests (`save_screenshot`), so they stay current; they
# are written only when asked (`make screenshots` sets TRAINHUB_SCREENSHOTS=1), so a test
# run leaves the checkout as it was.
SCREENSHOTS = ROOT / "docs" / "screenshots"

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = os.environ.get("TRAINHUB_CHROMIUM") or shutil.which("chromium")
    if path is None:
        pytest.fail("Chromium is not installed: `apt-get install chromium` (CI does this)")
    return path


def sign_in(page: Page, url: str, username: str, password: str, next_path: str = "/") -> None:
    page.goto(f"{url}/login/?next={next_path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}{next_path}")


_ASSETS = frozenset({"script", "stylesheet", "image", "font", "manifest"})


class PageErrors:
    """JavaScript errors a page raised (uncaught exceptions and console errors) and
    resources it failed to load.

    A page that answers 404 on purpose (another team's job) is not an error, but a script,
    style sheet or image the page is built from that fails to load is: the browser's own
    console line for a failed load is replaced by a check of those responses.
    """

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", self._console)
        page.on("response", self._response)
        page.on(
            "requestfailed",
            lambda request: (
                self.errors.append(
                    f"request failed: {request.method} {request.url} ({request.failure})"
                )
                if request.resource_type != "document"
                and "ERR_ABORTED" not in (request.failure or "")
                else None
            ),
        )

    def _console(self, message: ConsoleMessage) -> None:
        if message.type != "error" or message.text.startswith("Failed to load resource"):
            return
        if message.text.startswith(_HTMX_ABORT):
            return  # a poll cut short by a navigation: as ERR_ABORTED requests above
        self.errors.append(f"console.error: {message.text}")

    def _response(self, response: Response) -> None:
        # Fetches may answer 4xx on purpose (a refused form shows its errors); the assets a
        # page is built from may not.
        if response.status >= 400 and response.request.resource_type in _ASSETS:
            self.errors.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    def assert_none(self) -> None:
        assert not self.errors, "JavaScript errors:\n" + "\n".join(self.errors)


# What htmx logs when the browser aborts one of its requests (the page navigated away or
# closed while a poll was in flight); a failed request logs htmx:sendError or
# htmx:responseError instead, which stay errors.
_HTMX_ABORT = ("htmx:sendAbort", "htmx:afterRequest")


@contextmanager
def signed_in(
    browser: Browser, url: str, username: str, password: str, *, dark: bool = False
) -> Iterator[Page]:
    """A fresh browser context signed in as `username`; fails if any page it opened logged
    a JavaScript error."""
    context: BrowserContext = browser.new_context(
        viewport={"width": 1280, "height": 900}, color_scheme="dark" if dark else "light"
    )
    page = context.new_page()
    errors = PageErrors(page)
    try:
        sign_in(page, url, username, password)
        yield page
        errors.assert_none()
    finally:
        context.close()


def axe_violations(page: Page, *, impacts: tuple[str, ...] = ("serious", "critical")) -> list[Any]:
    """axe-core's violations of the given impacts on the page as it is now."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `make install` (npm ci installs axe-core)")
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => await window.axe.run(document)")
    return [v for v in result["violations"] if v.get("impact") in impacts]


# A desktop and a phone (issue 28): every axe check runs at both widths.
AXE_WIDTHS = (1280, 390)


def assert_accessible(page: Page) -> None:
    """No serious or critical axe violation at 1280 and 390 px wide, in light and in dark
    colours (an empty <title> is one: axe's `document-title`); the page is left at its own
    size, in light colours."""
    size = page.viewport_size or {"width": AXE_WIDTHS[0], "height": 900}
    try:
        for width in AXE_WIDTHS:
            page.set_viewport_size({"width": width, "height": size["height"]})
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                found = axe_violations(page)
                summary = [
                    {
                        "id": v["id"],
                        "impact": v["impact"],
                        "help": v["help"],
                        "nodes": [n["target"] for n in v["nodes"][:5]],
                    }
                    for v in found
                ]
                assert not found, (
                    f"axe ({width} px, {scheme}) on {page.url}:\n{json.dumps(summary, indent=1)}"
                )
    finally:
        page.set_viewport_size(size)
        page.emulate_media(color_scheme="light")


def screenshots_asked() -> bool:
    return os.environ.get("TRAINHUB_SCREENSHOTS") == "1"


def save_screenshot(page: Page, name: str) -> Path | None:
    """Save a screenshot for the README under docs/screenshots/<name>.png when asked
    (TRAINHUB_SCREENSHOTS=1); else nothing is written and None is returned."""
    if not screenshots_asked():
        return None
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    return path
