"""The dashboard in a real browser: a platform admin sees the cluster's capacity and the
recsys team's quota bar, and a job alice submits shows up without a reload; a member of
another team reads how many jobs wait in the whole cluster (the queue Check places a new
job in), never their names."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from ..test_services_mode import movielens_spec
from .conftest import PASSWORD, SignedIn
from .jobs_cleanup import ended_afterwards, small_spec

LIVE_MS = 15_000  # the dashboard polls every ~4 s


def _submit_as(live_cluster: LiveCluster, username: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit with the person's own API token, so the job is theirs."""
    token = httpx.post(
        f"{live_cluster.url}/api/v1/auth/token/",
        json={"username": username, "password": PASSWORD},
    ).raise_for_status()
    response = httpx.post(
        f"{live_cluster.url}/api/v1/jobs/",
        json=spec,
        headers={"Authorization": f"Token {token.json()['token']}"},
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


def _end(live_cluster: LiveCluster, job_id: int) -> None:
    """Cancel the job and wait for it to end: the cluster is shared with later tests."""
    live_cluster.api.post(f"/jobs/{job_id}/cancel/")
    live_cluster.wait_state(job_id, {"cancelled", "succeeded", "failed"}, timeout=120)


def _wait_running(live_cluster: LiveCluster, job_id: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if live_cluster.job(job_id)["state"] == "running":
            return True
        time.sleep(0.5)
    return False


def test_admin_sees_capacity_team_bars_and_a_new_job_without_reload(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    page: Page
    with as_person("admin") as page:
        page.goto(f"{live_cluster.url}/")
        cpu = page.locator('.capacity[data-resource="cpu"]')
        expect(cpu).to_contain_text("CPU allocated")
        expect(cpu.locator(".bar .used")).to_have_count(1)
        recsys = page.locator('tr[data-team="recsys"]')
        expect(recsys).to_contain_text("used of 2 CPU")
        expect(recsys.locator('td[data-resource="cpu"] .bar')).to_be_visible()
        expect(page.locator("#live-status")).to_have_text("live")
        # One memory unit per card: "0 GiB of 23.5 GiB", never "0 MiB of 23.5 GiB".
        memory = page.locator('.capacity[data-resource="memory_mb"]').inner_text()
        units = set(re.findall(r"\b(MiB|GiB|TiB)\b", memory))
        assert len(units) == 1, memory
        assert_accessible(page)

        page.evaluate("window.__notReloaded = true")
        job = _submit_as(live_cluster, "alice", movielens_spec("dashboard-live", {"epochs": 10000}))
        try:
            link = page.locator(f'#dashboard-body a[href="/jobs/{job["id"]}/"]').first
            expect(link).to_be_visible(timeout=LIVE_MS)
            if _wait_running(live_cluster, job["id"], timeout=120):
                row = page.locator(f'.running tr[data-job-id="{job["id"]}"]')
                expect(row.locator(".state")).to_have_text("running", timeout=LIVE_MS)
                expect(recsys).not_to_contain_text("0 CPU used", timeout=LIVE_MS)
            assert page.evaluate("window.__notReloaded") is True
            save_screenshot(page, "dashboard")
            assert_accessible(page)
        finally:
            _end(live_cluster, job["id"])


def test_a_member_sees_only_their_team_on_the_dashboard(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("carol") as page:
        page.goto(f"{live_cluster.url}/")
        expect(page.locator('tr[data-team="vision"]')).to_be_visible()
        expect(page.locator('tr[data-team="recsys"]')).to_have_count(0)
        assert_accessible(page)


def test_a_member_reads_how_many_jobs_wait_in_the_whole_cluster(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    """Carol (vision) has nothing pending while a recsys job waits: her dashboard must not
    say the queue is empty when Check would place her job behind it."""
    with ended_afterwards(live_cluster) as started:
        # Two 1.5-CPU jobs cannot both fit recsys's 2 CPUs: the second waits.
        first = live_cluster.submit(**small_spec("dash-queue-first"))
        started.append(first["id"])
        live_cluster.wait_state(first["id"], {"starting", "running"}, timeout=120)
        second = live_cluster.submit(**small_spec("dash-queue-second"))
        started.append(second["id"])
        pending = live_cluster.api.get("/jobs/", params={"state": "pending"}).json()["count"]
        assert pending >= 1 and live_cluster.job(second["id"])["state"] == "pending"
        with as_person("carol") as page:
            page.goto(f"{live_cluster.url}/")
            queue = page.locator(".queue")
            expect(queue.locator(".stat")).to_have_text("0 of your teams' jobs pending")
            cluster = page.locator("#cluster-queue")
            expect(cluster).to_have_attribute("data-cluster-pending", str(pending))
            expect(cluster).to_contain_text(
                re.compile(
                    rf"^{pending} jobs? pending in the whole cluster \({pending} of other "
                    r"teams\): a new job's place in the queue, as Check on the submit page "
                    r"gives it, counts them all\.$"
                )
            )
            expect(queue).to_contain_text("None of your teams' jobs waits.")
            # A number only: the other team's jobs are not named anywhere on the page.
            expect(page.locator("body")).not_to_contain_text("dash-queue")
            assert_accessible(page)
