"""A job page's live feed through nginx (its WebSocket passed through by the shipped
configuration): opened while the job waits, it follows the job to success without a
reload, on an https page with secure cookies."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.cluster.conftest import movielens, submit, wait_state
from tests.cluster.harness import Cluster
from tests.e2e.browser import CHROMIUM_FLAGS, PageErrors, chromium_path, sign_in
from tests.e2e.cluster import ADMIN

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_a_job_page_follows_its_job_live_through_nginx(cluster: Cluster) -> None:
    nodes = [n["id"] for n in cluster.nodes().values()]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        # The run's own certificate is not in Chromium's store (the API clients trust it).
        context = browser.new_context(ignore_https_errors=True)
        page = context.new_page()
        errors = PageErrors(page)
        try:
            sign_in(page, cluster.url, *ADMIN)
            for node in nodes:  # the job waits until the page is open
                cluster.api.post(f"/api/v1/nodes/{node}/cordon/").raise_for_status()
            try:
                job = submit(cluster, movielens("live-through-nginx", epochs=2))
                page.goto(f"{cluster.url}/jobs/{job['id']}/")
                expect(page.locator("#job-state")).to_have_text("pending")
                expect(page.locator("#live-status")).to_have_text("live", timeout=15_000)
                page.evaluate("() => { window.__notReloaded = true; }")
                # One host for the whole job (each host keeps its own checkpoints).
                cluster.api.post(f"/api/v1/nodes/{nodes[0]}/uncordon/").raise_for_status()
                wait_state(cluster, job["id"], {"starting", "running", "succeeded"}, timeout=120)
            finally:
                for node in nodes:
                    cluster.api.post(f"/api/v1/nodes/{node}/uncordon/").raise_for_status()
            expect(page.locator("#job-state")).to_have_text("succeeded", timeout=180_000)
            assert page.evaluate("() => window.__notReloaded") is True
            errors.assert_none()
        finally:
            context.close()
            browser.close()
    assert wait_state(cluster, job["id"], {"succeeded"}, timeout=10)["state"] == "succeeded"
