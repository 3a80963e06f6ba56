"""Two finished jobs compared in a real browser: one chart per metric with a line per job,
and the spec fields where they differ."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from ..test_services_mode import movielens_spec
from .conftest import SignedIn

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]


def test_two_jobs_are_compared(live_cluster: LiveCluster, as_person: SignedIn) -> None:
    # One after the other on the 2-CPU node; each takes a few seconds.
    jobs = [
        live_cluster.submit(**movielens_spec(name, {"epochs": 1, "dim": dim}))
        for name, dim in (("cmp-small", 8), ("cmp-large", 16))
    ]
    for job in jobs:
        done = live_cluster.wait_state(job["id"], {"succeeded", "failed", "cancelled"}, 240)
        assert done["state"] == "succeeded", live_cluster.logs(job["id"])
    ids = ",".join(str(job["id"]) for job in jobs)
    labels = [f"{job['name']} #{job['id']}" for job in jobs]
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/jobs/compare/?ids={ids}")
        chart = page.locator('[data-metric="test_rmse"]')
        expect(chart).to_have_count(1, timeout=15_000)
        for label in labels:
            expect(chart.locator(".u-legend")).to_contain_text(label)
        expect(page.locator('[data-metric="train_loss"]')).to_have_count(1)
        diff = page.locator("#spec-diff")
        expect(diff.locator('tr[data-path="args.dim"]')).to_contain_text("8")
        expect(diff.locator('tr[data-path="args.dim"]')).to_contain_text("16")
        expect(diff.locator('tr[data-path="args.epochs"]')).to_have_count(0)
        # Each run's final and best value per metric, the best run named in words.
        finals = page.locator("#compare-finals")
        rmse = finals.locator('tr[data-final="test_rmse"]')
        expect(rmse).to_contain_text("lower is better")
        expect(rmse.locator("td")).to_have_count(2)
        expect(rmse.locator("td.best-run")).to_have_count(1)
        expect(rmse.locator("td.best-run")).to_contain_text("best run")
        page.locator("#compare-finals").scroll_into_view_if_needed()
        save_screenshot(page, "compare")
        assert_accessible(page)

        # Each run keeps one colour on every chart, and on the next load.
        colours = _run_colours(page, "test_rmse")
        assert len(set(colours)) == 2, colours
        assert _run_colours(page, "train_loss") == colours
        page.reload()
        expect(chart.locator(".u-legend")).to_contain_text(labels[1], timeout=15_000)
        assert _run_colours(page, "test_rmse") == colours  # the legend in the jobs' order

        # Every chart on a log scale (RMSE is above zero), and smoothed.
        expect(chart).to_have_attribute("data-scale", "linear")
        page.get_by_label("Log scale").check()
        expect(chart).to_have_attribute("data-scale", "log")
        slider = page.get_by_label("Smoothing")
        slider.focus()
        page.keyboard.press("ArrowRight")  # the keyboard moves it, as the mouse does
        expect(page.locator("#smoothing-value")).to_have_text("0.05")
        expect(chart.locator(".u-legend")).to_contain_text(labels[0])  # redrawn, not lost

        # By epoch (the example reports `epoch` with each evaluation), and by time.
        page.get_by_label("Epoch").check()
        expect(chart).to_have_attribute("data-x", "epoch")
        expect(chart).to_have_attribute("data-drawn", "2")
        expect(chart.locator(".u-legend .u-series").first).to_contain_text("epoch")
        page.get_by_label("Time").check()
        expect(chart).to_have_attribute("data-x", "time")
        expect(chart).to_have_attribute("data-drawn", "2")
        expect(chart.locator(".u-legend .u-series").first).to_contain_text("time")
        expect(page.locator("#x-axis-note")).to_be_hidden()
        page.get_by_label("Step").check()
        expect(chart).to_have_attribute("data-x", "step")

        # A running job is compared live: its lines, its state and its final values
        # arrive without a reload.
        live = live_cluster.submit(**movielens_spec("cmp-live", {"epochs": 2, "dim": 8}))
        page.goto(f"{live_cluster.url}/jobs/compare/?ids={jobs[0]['id']},{live['id']}")
        page.evaluate("window.__sameLoad = true")
        label = f"{live['name']} #{live['id']}"
        row = page.locator(f'#compare-jobs tr[data-job-id="{live["id"]}"]')
        assert row.get_attribute("data-state") not in {"succeeded", "failed", "cancelled"}
        expect(page.locator("#compare-live")).to_have_text("live", timeout=15_000)
        chart = page.locator('[data-metric="test_rmse"]')
        expect(chart.locator(".u-legend")).to_contain_text(label, timeout=240_000)
        expect(row.locator(".state")).to_have_text("succeeded", timeout=240_000)
        cell = page.locator('#compare-finals tr[data-final="test_rmse"] td').nth(1)
        expect(cell.locator(".final")).to_be_visible(timeout=15_000)
        assert page.evaluate("window.__sameLoad") is True
        assert_accessible(page)

        # Too few jobs: a message, not an error page.
        page.goto(f"{live_cluster.url}/jobs/compare/?ids={jobs[0]['id']}")
        expect(page.locator("#compare-error")).to_contain_text("Compare 2 to 6 jobs")
        assert_accessible(page)


_COLOURS_JS = """metric => {
  const rows = [...document.querySelectorAll(`[data-metric="${metric}"] .u-legend .u-series`)];
  return rows.slice(1)  // 0: the x axis
    .filter((r) => r.style.display !== 'none')
    .map((r) => r.querySelector('.u-marker')).filter(Boolean)
    .map((m) => getComputedStyle(m).borderColor)
    .filter((c) => c && c !== 'rgba(0, 0, 0, 0)');
}"""


def _run_colours(page: Page, metric: str) -> list[str]:
    """The line colour of each run in a metric's chart legend, in legend order (waiting
    while a theme change redraws the chart)."""
    page.wait_for_function(f"m => ({_COLOURS_JS})(m).length >= 2", arg=metric, timeout=15_000)
    colours: list[str] = page.evaluate(f"m => ({_COLOURS_JS})(m)", metric)
    return colours
