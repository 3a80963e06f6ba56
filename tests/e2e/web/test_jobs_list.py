"""The jobs list as alice sees it: jobs appear and change state without a reload, a pending
job shows its queue position and the scheduler's reason, filters swap only the table and
keep the URL, and picked jobs go to the comparison."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from .conftest import SignedIn
from .jobs_cleanup import ended_afterwards, small_spec

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

LIVE_TIMEOUT_MS = 60_000  # starting a job's processes on a busy 2-core machine


def test_a_pending_job_shows_its_reason_and_queue_position_live(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice") as page, ended_afterwards(live_cluster) as started:
        page.goto(f"{live_cluster.url}/jobs/?team=recsys")
        page.evaluate("window.__notReloaded = true")

        # Two jobs that cannot both fit recsys's 2 CPUs, submitted after the page loaded.
        first = live_cluster.submit(**small_spec("web-list-first"))
        started.append(first["id"])
        live_cluster.wait_state(first["id"], {"starting", "running"}, timeout=120)
        second = live_cluster.submit(**small_spec("web-list-second"))
        started.append(second["id"])

        row_first = page.locator(f'tr[data-job-id="{first["id"]}"]')
        row_second = page.locator(f'tr[data-job-id="{second["id"]}"]')
        expect(row_first.locator(".state")).to_have_text(
            re.compile("starting|running"), timeout=LIVE_TIMEOUT_MS
        )
        expect(row_second.locator(".state")).to_have_text("pending", timeout=LIVE_TIMEOUT_MS)
        # The scheduler's reason (not the placeholder it had before its first cycle), and
        # where it stands in the queue.
        expect(row_second.locator(".pending-reason")).not_to_have_text(
            "waiting for the scheduler", timeout=LIVE_TIMEOUT_MS
        )
        reason = live_cluster.job(second["id"])["pending_reason"]
        assert reason and reason != "waiting for the scheduler"
        expect(row_second.locator(".pending-reason")).to_have_text(reason, timeout=LIVE_TIMEOUT_MS)
        expect(row_second.locator(".queue-position")).to_have_text(re.compile(r"^#\d+ in queue$"))
        expect(row_first.locator(".queue-position")).to_have_count(0)
        assert page.evaluate("window.__notReloaded") is True
        expect(page.locator("#live-status")).to_have_text("live")

        assert_accessible(page)
        save_screenshot(page, "jobs")

        # Filters swap the table and keep the URL, without a reload.
        page.get_by_label("State").select_option("pending")
        page.wait_for_url(re.compile(r"/jobs/\?team=recsys&state=pending$"))
        expect(row_first).to_have_count(0)
        expect(row_second).to_be_visible()
        page.get_by_label("Name contains").fill("web-list-first")
        expect(row_second).to_have_count(0)
        expect(page.locator("#job-table")).to_contain_text("No jobs match these filters")
        assert page.evaluate("window.__notReloaded") is True

        # The same URL opened directly (no htmx) filters alike.
        page.goto(f"{live_cluster.url}/jobs/?state=pending&name=web-list")
        expect(row_second).to_be_visible()
        expect(row_first).to_have_count(0)
        expect(page.get_by_label("State")).to_have_value("pending")

        # Pick two jobs to compare.
        page.goto(f"{live_cluster.url}/jobs/?name=web-list")
        compare = page.get_by_role("button", name="Compare")
        expect(compare).to_be_disabled()
        page.get_by_label(f"Compare web-list-second (#{second['id']})").check()
        expect(compare).to_be_disabled()
        page.get_by_label(f"Compare web-list-first (#{first['id']})").check()
        expect(compare).to_be_enabled()
        # Picks survive the table's own refresh.
        page.wait_for_event("response", lambda r: "/jobs/?name=web-list" in r.url, timeout=10_000)
        page.wait_for_timeout(300)
        expect(page.get_by_label(f"Compare web-list-first (#{first['id']})")).to_be_checked()
        compare.click()
        page.wait_for_url(re.compile(rf"/jobs/compare/\?ids={second['id']},{first['id']}$"))


def test_chosen_metrics_are_columns_of_the_list(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    """Type metric names into "Metric columns": each job's final value is a column, and
    each started job's run time is in "Ran for"; a bad name is said beside the table."""
    with as_person("alice") as page, ended_afterwards(live_cluster) as started:
        job = live_cluster.submit(**small_spec("web-list-metrics", args={"epochs": 1}))
        started.append(job["id"])
        done = live_cluster.wait_state(job["id"], {"succeeded", "failed"}, timeout=240)
        assert done["state"] == "succeeded", live_cluster.logs(job["id"])
        page.goto(f"{live_cluster.url}/jobs/?name=web-list-metrics")
        page.get_by_label("Metric columns").fill("test_rmse, no_such_metric")
        page.wait_for_url(re.compile(r"metrics=test_rmse"))
        row = page.locator(f'tr[data-job-id="{job["id"]}"]')
        expect(page.locator("th.metric-column code")).to_have_text(["test_rmse", "no_such_metric"])
        expect(row.locator("td.metric-value").first).to_have_text(re.compile(r"^0\.\d+$"))
        expect(row.locator("td.metric-value").last).to_have_text("—")
        expect(row.locator("td.duration")).to_have_text(re.compile(r"^\d+ (s|min \d+ s)$"))
        assert_accessible(page)
        page.get_by_label("Metric columns").fill("a;b")
        expect(page.locator("#metrics-error")).to_contain_text("is not a metric name")
        expect(row).to_be_visible()
