"""The first way TrainHub is meant to be used, in one go as a member (alice of recsys):
sign in, submit through the form, find the job on the dashboard and on its page, watch a
chart gain points without a reload, and cancel it. No page logs a JavaScript error
(`as_person` fails the test if one does)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from ..cluster import LiveCluster
from .conftest import SignedIn
from .jobs_cleanup import ended_afterwards

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

POINTS = '[data-metric="train_loss"]'


def test_a_member_submits_watches_and_cancels_from_the_browser(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice") as page, ended_afterwards(live_cluster) as started:
        # Submit through the form (the nav offers it to members).
        page.goto(f"{live_cluster.url}/")
        page.get_by_role("link", name="Submit", exact=True).click()
        page.wait_for_url(f"{live_cluster.url}/jobs/new/")
        page.get_by_label("Name", exact=True).fill("journey-mf")
        page.get_by_label("Team", exact=True).select_option("recsys")
        page.get_by_label("Entrypoint").fill("ps_runtime.examples.movielens:train")
        page.get_by_label("Arguments (JSON or YAML)").fill("{epochs: 10000, report_every: 5}")
        for label in ("CPU per PS", "CPU per worker", "Coordinator CPU"):
            page.get_by_label(label, exact=True).fill("0.5")
        for label in ("Memory per PS (MiB)", "Memory per worker (MiB)", "Coordinator memory (MiB)"):
            page.get_by_label(label, exact=True).fill("512")
        page.get_by_role("button", name="Submit job").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        started.append(job_id)
        live_cluster.wait_state(job_id, {"running"}, timeout=120)

        # The dashboard lists it among the running jobs (its fragment refreshes itself).
        page.get_by_role("link", name="Dashboard", exact=True).click()
        page.wait_for_url(f"{live_cluster.url}/")
        running = page.locator(f'#dashboard-body tr[data-job-id="{job_id}"]')
        expect(running).to_contain_text("journey-mf", timeout=15_000)

        # Its page: live, and the chart gains points with no reload.
        running.get_by_role("link", name="journey-mf").click()
        page.wait_for_url(f"{live_cluster.url}/jobs/{job_id}/")
        page.evaluate("window.__notReloaded = true")
        expect(page.locator("#live-status")).to_have_text("live", timeout=15_000)
        page.wait_for_selector(POINTS, timeout=30_000)
        before = int(page.locator(POINTS).get_attribute("data-points") or 0)
        page.wait_for_function(
            f"n => Number(document.querySelector('{POINTS}').dataset.points) > n + 2",
            arg=before,
            timeout=30_000,
        )

        # Cancel, confirmed in the dialog; the new state arrives over the feed.
        page.get_by_role("button", name="Cancel job…").click()
        page.get_by_role("dialog").get_by_role("button", name="Cancel job", exact=True).click()
        expect(page.locator("#job-state")).to_have_text("cancelled", timeout=15_000)
        assert page.evaluate("window.__notReloaded") is True
    assert live_cluster.job(job_id)["state"] == "cancelled"
