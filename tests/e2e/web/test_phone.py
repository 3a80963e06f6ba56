"""Every page on a phone (issue 28, item 4): at 390 and 360 px wide nothing is wider than
the screen, the navigation collapses behind a button that opens with the keyboard (and,
without JavaScript, stays usable), tables scroll inside themselves, the submit page's
"Would it start now?" panel sits below the form, and axe finds no serious or critical
violation at 390 px, light and dark."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from ..browser import assert_accessible, save_screenshot, sign_in
from ..cluster import ADMIN, LiveCluster
from ..test_services_mode import movielens_spec
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

PHONE: ViewportSize = {"width": 390, "height": 844}
SMALL_PHONE: ViewportSize = {"width": 360, "height": 780}
LARGE_PHONE: ViewportSize = {"width": 430, "height": 932}
TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture(scope="module")
def finished_jobs(live_cluster: LiveCluster) -> list[dict[str, Any]]:
    """Two short jobs run to the end: a job page with charts and tables, and a comparison."""
    jobs = [
        live_cluster.submit(**movielens_spec(name, {"epochs": 1, "dim": dim}))
        for name, dim in (("phone-small", 8), ("phone-large", 16))
    ]
    # Only their pages matter here: a job that failed still has a page and can be compared.
    return [live_cluster.wait_state(job["id"], TERMINAL, 240) for job in jobs]


@pytest.fixture(scope="module")
def pages(live_cluster: LiveCluster, finished_jobs: list[dict[str, Any]]) -> dict[str, str]:
    """Every signed-in page, by name: its path."""
    node = live_cluster.api.get("/nodes/").json()["results"][0]
    ids = ",".join(str(job["id"]) for job in finished_jobs)
    return {
        "dashboard": "/",
        "jobs": "/jobs/",
        "job": f"/jobs/{finished_jobs[0]['id']}/",
        "submit": "/jobs/new/",
        "compare": f"/jobs/compare/?ids={ids}",
        "nodes": "/nodes/",
        "node": f"/nodes/{node['id']}/",
        "teams": "/teams/",
        "team": "/teams/recsys/",
        "users": "/users/",
        "user": "/users/alice/",
        "whatif": "/whatif/?days=7",
        "account": "/account/",
        "not found": "/jobs/999999/",
    }


def _overflow(page: Page) -> dict[str, Any]:
    """How wide the document is against the screen, and the first elements past its edge
    that no scrolling box of their own holds."""
    return dict(
        page.evaluate(
            """() => {
              const width = window.innerWidth;
              const held = node => {
                for (let p = node.parentElement; p && p !== document.body; p = p.parentElement) {
                  if (getComputedStyle(p).overflowX !== 'visible') return true;
                }
                return false;
              };
              const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
                + (typeof el.className === 'string' && el.className.trim()
                   ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
              const past = [...document.querySelectorAll('body *')]
                .filter(el => {
                  const box = el.getBoundingClientRect();
                  return box.width > 0 && box.right > width + 0.5 && !held(el);
                })
                .slice(0, 6)
                .map(el => `${name(el)} right=${Math.round(el.getBoundingClientRect().right)}`);
              // Text too long to wrap overflows a box that itself fits.
              const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
              const range = document.createRange();
              for (let node; (node = walker.nextNode()) && past.length < 8;) {
                range.selectNodeContents(node);
                const right = range.getBoundingClientRect().right;
                if (right > width + 0.5 && !held(node)) {
                  past.push(`"${node.textContent.trim().slice(0, 40)}" in `
                            + `${name(node.parentElement)} right=${Math.round(right)}`);
                }
              }
              return {scroll: document.documentElement.scrollWidth, inner: width, past};
            }"""
        )
    )


def _settled_overflow(page: Page) -> dict[str, Any]:
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)  # htmx and the page scripts fill in their parts
    return _overflow(page)


def _assert_fits(page: Page, name: str) -> None:
    found = _settled_overflow(page)
    assert found["scroll"] <= found["inner"], f"{name} ({page.url}) overflows: {found}"


@pytest.fixture
def phone(as_person: SignedIn) -> Iterator[Page]:
    with as_person("admin") as page:
        page.set_viewport_size(PHONE)
        yield page


@pytest.mark.parametrize("viewport", [PHONE, SMALL_PHONE, LARGE_PHONE], ids=["390", "360", "430"])
def test_no_page_is_wider_than_a_phone(
    as_person: SignedIn, live_cluster: LiveCluster, pages: dict[str, str], viewport: ViewportSize
) -> None:
    with as_person("admin") as page:
        page.set_viewport_size(viewport)
        too_wide = {}
        for name, path in pages.items():
            page.goto(f"{live_cluster.url}{path}")
            found = _settled_overflow(page)
            if found["scroll"] > found["inner"]:
                too_wide[name] = found
        assert not too_wide, f"wider than {viewport['width']} px: {too_wide}"


def test_the_login_page_fits_a_phone(browser: Browser, live_cluster: LiveCluster) -> None:
    context = browser.new_context(viewport=PHONE)
    try:
        page = context.new_page()
        page.goto(f"{live_cluster.url}/login/")
        _assert_fits(page, "login")
        assert_accessible(page)
    finally:
        context.close()


def test_every_page_is_accessible_on_a_phone(
    as_person: SignedIn, live_cluster: LiveCluster, pages: dict[str, str]
) -> None:
    """axe on every page opened at 390 px (assert_accessible checks it there and at 1280 px,
    light and dark), and with the menu open."""
    with as_person("admin") as page:
        page.set_viewport_size(PHONE)
        for path in pages.values():
            page.goto(f"{live_cluster.url}{path}")
            page.wait_for_load_state("load")
            assert_accessible(page)
        page.get_by_role("button", name="Menu").click()
        expect(page.get_by_role("navigation", name="Main")).to_be_visible()
        assert_accessible(page)


def test_the_navigation_collapses_and_opens_with_the_keyboard(
    phone: Page, live_cluster: LiveCluster
) -> None:
    page = phone
    page.goto(f"{live_cluster.url}/")
    nav = page.get_by_role("navigation", name="Main")
    menu = page.get_by_role("button", name="Menu")
    dashboard = nav.get_by_role("link", name="Dashboard")
    expect(menu).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(dashboard).to_be_hidden()
    save_screenshot(page, "phone")

    # Tab from the top of the page: the skip link, the brand, then the menu button.
    for _ in range(3):
        page.keyboard.press("Tab")
    expect(menu).to_be_focused()
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(dashboard).to_be_visible()
    expect(dashboard).to_have_attribute("aria-current", "page")
    _assert_fits(page, "the dashboard with the menu open")
    page.keyboard.press("Tab")
    expect(dashboard).to_be_focused()

    # Escape closes it and gives the focus back to the button; Space opens it again.
    page.keyboard.press("Escape")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(dashboard).to_be_hidden()
    expect(menu).to_be_focused()
    page.keyboard.press("Space")
    expect(menu).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("aria-expanded", "false")

    # A wide screen shows the links and no button.
    page.set_viewport_size({"width": 1280, "height": 900})
    expect(menu).to_be_hidden()
    expect(dashboard).to_be_visible()


def test_without_javascript_the_navigation_stays_usable(
    browser: Browser, live_cluster: LiveCluster
) -> None:
    """Progressive enhancement: no script, no button; the links wrap and stay in reach."""
    context = browser.new_context(viewport=PHONE, java_script_enabled=False)
    try:
        page = context.new_page()
        sign_in(page, live_cluster.url, *ADMIN, next_path="/jobs/")
        nav = page.get_by_role("navigation", name="Main")
        expect(page.get_by_role("button", name="Menu")).to_be_hidden()
        for name in ("Dashboard", "Jobs", "Account"):
            expect(nav.get_by_role("link", name=name)).to_be_visible()
        _assert_fits(page, "jobs without JavaScript")
    finally:
        context.close()


def test_the_check_panel_sits_below_the_form(phone: Page, live_cluster: LiveCluster) -> None:
    page = phone
    page.goto(f"{live_cluster.url}/jobs/new/")
    form = page.locator(".submit-main").bounding_box()
    check = page.get_by_role("region", name="Would it start now?").bounding_box()
    assert form is not None and check is not None
    assert check["y"] >= form["y"] + form["height"], (form, check)
    # Scrolled to the end of the form, the panel still does not cover it.
    page.get_by_label("Workers (max)").scroll_into_view_if_needed()
    form = page.locator(".submit-main").bounding_box()
    check = page.get_by_role("region", name="Would it start now?").bounding_box()
    assert form is not None and check is not None
    assert check["y"] >= form["y"] + form["height"], (form, check)
    page.get_by_role("button", name="Check").click()
    expect(page.locator("#preview .preview")).to_be_visible()
    _assert_fits(page, "submit after a check")


def test_wide_tables_scroll_inside_their_own_box(phone: Page, live_cluster: LiveCluster) -> None:
    page = phone
    page.goto(f"{live_cluster.url}/nodes/")
    table = page.locator("table.nodes")
    expect(table).to_be_visible()
    box = table.evaluate(
        "t => { const s = t.closest('.table-scroll') || t;"
        " return {client: s.clientWidth, scroll: s.scrollWidth,"
        " overflow: getComputedStyle(s).overflowX}; }"
    )
    assert box["client"] <= PHONE["width"], box
    if box["scroll"] > box["client"]:
        assert box["overflow"] in ("auto", "scroll"), box
