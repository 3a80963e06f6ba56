"""The job page in a real browser (services mode): a member watches a running job's chart
gain points without a reload, reads its logs, and cancels it through the confirmation
dialog; a pending job says why it waits and where it stands; a job over its telemetry
budgets says what was dropped; another team gets 404."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Browser, Page, expect

from ..browser import assert_accessible, save_screenshot, sign_in
from ..cluster import LiveCluster
from ..test_services_mode import SMALL, movielens_spec
from .conftest import Person, SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture
def started(live_cluster: LiveCluster) -> Iterator[list[dict[str, Any]]]:
    """Jobs a test submits; cancelled and waited for afterwards (the cluster is shared)."""
    jobs: list[dict[str, Any]] = []
    yield jobs
    for job in jobs:
        live_cluster.api.post(f"/jobs/{job['id']}/cancel/")
    for job in jobs:
        live_cluster.wait_state(job["id"], TERMINAL, timeout=120)


def _points(page: Page, metric: str) -> int:
    return int(page.locator(f'[data-metric="{metric}"]').get_attribute("data-points") or 0)


def test_a_member_watches_a_running_job_and_cancels_it(
    live_cluster: LiveCluster, as_person: SignedIn, started: list[dict[str, Any]]
) -> None:
    spec = movielens_spec("web-job-page", {"epochs": 10000, "report_every": 5})
    spec["workers"] = {"min": 1, "max": 2, "resources": SMALL}
    job = live_cluster.submit(**spec)
    started.append(job)
    live_cluster.wait_state(job["id"], {"running"}, timeout=120)
    url = f"{live_cluster.url}/jobs/{job['id']}/"
    with as_person("alice") as page:
        page.goto(url)
        page.evaluate("window.__notReloaded = true")
        expect(page.locator("#live-status")).to_have_text("live", timeout=15_000)
        page.wait_for_selector('[data-metric="train_loss"]', timeout=30_000)
        before = _points(page, "train_loss")
        page.wait_for_function(
            "n => Number(document.querySelector('[data-metric=\"train_loss\"]')"
            ".dataset.points) > n + 2",
            arg=before,
            timeout=30_000,
        )
        expect(page.locator("#job-state")).to_have_text("running")
        expect(page.locator("#tasks tbody tr[data-task-id]")).to_have_count(3)
        expect(page.locator('#last-values tr[data-last-metric="train_loss"]')).to_have_count(1)
        save_screenshot(page, "job")
        assert_accessible(page)

        # Logs open at the tail and filter by task; the tabs work from the keyboard.
        page.get_by_role("tab", name="Overview").focus()
        page.keyboard.press("ArrowRight")
        expect(page.get_by_role("tab", name="Logs")).to_have_attribute("aria-selected", "true")
        expect(page.locator("#panel-logs")).to_be_visible()
        expect(page.locator("#panel-overview")).to_be_hidden()
        expect(page.locator("#logs span").first).to_be_visible(timeout=15_000)
        page.get_by_label("Task", exact=True).select_option("coordinator-0")
        expect(page.locator("#logs span").first).to_contain_text("[coordinator-0]")
        shown = page.locator("#logs span").all_inner_texts()
        assert shown and all(text.startswith("[coordinator-0]") for text in shown), shown[:5]
        assert_accessible(page)
        for tab in ("Events", "Checkpoints", "Configuration"):
            page.get_by_role("tab", name=tab).click()
            assert_accessible(page)
        expect(page.locator("#job-spec")).to_contain_text("entrypoint: ps_runtime.examples")
        page.get_by_role("tab", name="Overview").click()

        # Scale within min..max: the outcome replaces the actions, no reload.
        page.get_by_label("Workers").fill("2")
        page.get_by_role("button", name="Scale").click()
        expect(page.locator("#job-actions .notice")).to_contain_text("Target set to 2 workers")
        # Carried out at the scheduler's next cycle: no freeze window is promised.
        expect(page.locator("#job-actions .notice")).to_contain_text("at its next cycle")
        expect(page.locator("#workers-target")).to_have_text("2")

        # Cancel, confirmed in the dialog; the state arrives over the feed.
        page.get_by_role("button", name="Cancel job…").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_be_visible()
        assert_accessible(page)
        dialog.get_by_role("button", name="Cancel job", exact=True).click()
        expect(page.locator("#job-state")).to_have_text("cancelled", timeout=15_000)
        expect(page.locator("#job-actions .notice")).to_contain_text("Cancelled")
        expect(page.get_by_role("button", name="Cancel job…")).to_have_count(0)
        assert page.evaluate("window.__notReloaded") is True
    assert live_cluster.job(job["id"])["state"] == "cancelled"


def test_a_pending_job_shows_why_it_waits_and_its_place(
    live_cluster: LiveCluster, as_person: SignedIn, started: list[dict[str, Any]]
) -> None:
    # 1.5 CPUs of the 2-CPU node are taken: another 1.5 waits, and says why (a job larger
    # than the whole cluster is refused at submission instead).
    blocker = live_cluster.submit(**movielens_spec("web-blocker", {"epochs": 10000}))
    started.append(blocker)
    live_cluster.wait_state(blocker["id"], {"running"}, timeout=120)
    job = live_cluster.submit(**movielens_spec("web-waits", {"epochs": 1}))
    started.append(job)
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/jobs/{job['id']}/")
        expect(page.locator("#job-state")).to_have_text("pending")
        queue = page.locator("#job-queue")
        expect(queue).to_contain_text("Waiting:")
        expect(queue.locator("#queue-position")).to_have_text("1", timeout=15_000)
        # The scheduler's reason replaces "waiting for the scheduler" without a reload.
        expect(queue).not_to_contain_text("waiting for the scheduler", timeout=30_000)
        assert_accessible(page)


def test_a_job_whose_budgets_dropped_telemetry_says_so_light_and_dark(
    live_cluster: LiveCluster, as_person: SignedIn, started: list[dict[str, Any]]
) -> None:
    job = live_cluster.submit(**movielens_spec("web-over-budget", {"epochs": 1}))
    started.append(job)
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/jobs/{job['id']}/")
        expect(page.locator("#job-state")).to_be_visible()
        expect(page.locator("#telemetry-notice")).to_have_count(0)
    live_cluster.wait_state(job["id"], TERMINAL, timeout=120)
    # What ingest records when a job's reports go over its budgets (tests/trainhub/
    # telemetry/test_budgets.py): written to the cluster's database directly, as a job
    # of 10 million points is too long for a browser test.
    with psycopg.connect(live_cluster.group.env["DATABASE_URL"], autocommit=True) as db:
        db.execute(
            "INSERT INTO telemetry_jobtelemetry (job_id, points, points_dropped, log_bytes,"
            " log_lines_dropped, log_bytes_dropped) VALUES (%s, 10000000, 1234, 0, 56, 7890)"
            " ON CONFLICT (job_id) DO UPDATE SET points_dropped = 1234,"
            " log_lines_dropped = 56, log_bytes_dropped = 7890",
            [job["id"]],
        )
    for dark in (False, True):
        with as_person("alice", dark=dark) as page:
            page.goto(f"{live_cluster.url}/jobs/{job['id']}/")
            notice = page.get_by_role("status").filter(has_text="were not stored")
            expect(notice).to_be_visible()
            # Late output of the job's tasks may still arrive, and is dropped and counted.
            expect(notice).to_contain_text(re.compile(r"1,2\d\d metric points were not stored"))
            expect(notice).to_contain_text(re.compile(r"\d+ log lines \(.+B\) were not stored"))
            # Above the tabs: still shown on the logs tab, reached from the keyboard.
            page.get_by_role("tab", name="Overview").focus()
            page.keyboard.press("ArrowRight")
            expect(page.locator("#panel-logs")).to_be_visible()
            expect(notice).to_be_visible()
            assert_accessible(page)


def test_another_teams_member_gets_404(
    live_cluster: LiveCluster,
    browser: Browser,
    people: dict[str, Person],
    started: list[dict[str, Any]],
) -> None:
    job = live_cluster.submit(**movielens_spec("web-not-yours", {"epochs": 1}))
    started.append(job)
    # Not `as_person`: Chromium logs every 404 answer as a console error, and a 404 is the
    # point here; uncaught JavaScript exceptions still fail the test.
    context = browser.new_context()
    try:
        page = context.new_page()
        exceptions: list[str] = []
        page.on("pageerror", lambda exc: exceptions.append(str(exc)))
        carol = people["carol"]
        sign_in(page, live_cluster.url, carol.username, carol.password)
        response = page.goto(f"{live_cluster.url}/jobs/{job['id']}/")
        assert response is not None and response.status == 404
        assert "web-not-yours" not in page.content()
        assert exceptions == []
    finally:
        context.close()
