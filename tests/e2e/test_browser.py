"""A real browser (Playwright driving Debian's headless Chromium) watches a job live."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .browser import sign_in as signed_in_as_admin
from .cluster import ADMIN, LiveCluster
from .test_services_mode import movielens_spec

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def sign_in(page: Page, url: str, next_path: str) -> None:
    signed_in_as_admin(page, url, *ADMIN, next_path=next_path)


def test_job_page_chart_gains_points_without_reload(
    live_cluster: LiveCluster, browser: Browser, tmp_path: Path
) -> None:
    job = live_cluster.submit(**movielens_spec("browser-e2e", {"epochs": 10000, "report_every": 5}))
    live_cluster.wait_state(job["id"], {"running"}, timeout=120)
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        sign_in(page, live_cluster.url, f"/jobs/{job['id']}/")
        page.evaluate("window.__notReloaded = true")
        try:
            chart = page.wait_for_selector('[data-metric="train_loss"]', timeout=30_000)
        except PlaywrightTimeout:
            # Say why: a job that ended (or never reported) is not the page's fault.
            state = live_cluster.job(job["id"])["state"]
            raise AssertionError(
                f"no train_loss chart after 30 s; job {state}:\n{live_cluster.logs(job['id'])}"
            ) from None
        assert chart is not None
        before = int(chart.get_attribute("data-points") or 0)
        page.wait_for_function(
            "n => Number(document.querySelector('[data-metric=\"train_loss\"]')"
            ".dataset.points) > n + 2",
            arg=before,
            timeout=30_000,
        )
        assert page.evaluate("window.__notReloaded") is True
        assert page.locator("#job-state").inner_text() == "running"
        assert page.locator("#live-status").inner_text() == "live"
        assert page.locator("canvas").count() >= 1
        page.screenshot(path=str(tmp_path / "job-page.png"), full_page=True)

        # A state change reaches the open page too.
        live_cluster.api.post(f"/jobs/{job['id']}/cancel/")
        page.wait_for_function(
            "() => document.querySelector('#job-state').textContent.trim() === 'cancelled'",
            timeout=15_000,
        )
        page.wait_for_function(
            "() => [...document.querySelectorAll('#events li')]"
            ".some(li => li.textContent.includes('→ cancelled'))",
            timeout=15_000,
        )
        assert page.evaluate("window.__notReloaded") is True
        assert errors == []
    finally:
        page.close()
        live_cluster.api.post(f"/jobs/{job['id']}/cancel/")


def test_job_list_links_to_the_job_page(live_cluster: LiveCluster, browser: Browser) -> None:
    job = live_cluster.submit(**movielens_spec("list-e2e", {"epochs": 1}))
    page = browser.new_page()
    try:
        sign_in(page, live_cluster.url, "/jobs/")
        page.click("text=list-e2e")
        page.wait_for_url(f"{live_cluster.url}/jobs/{job['id']}/")
        assert "list-e2e" in page.locator("h1").inner_text()
    finally:
        page.close()
        live_cluster.wait_state(job["id"], {"succeeded", "failed", "cancelled"}, timeout=120)
