"""The experiment pages in a real browser, on Django's live server with the test's own
database: no agent and no Celery worker, so the trials' jobs wait until the test plays
them (tests/trainhub/experiments/driver.py). While the page is open, each round of ended
runs starts new trials and may change the best one: the page shows both without a
reload. Pause, resume and cancel work from the keyboard; an experiment is submitted from
the submit page's search section; every page is axe-clean."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect
from trainhub.experiments.models import Experiment
from trainhub.tenancy.choices import Role

from ...trainhub.event_capture import HANDLER
from ...trainhub.experiments.driver import advance, end_run, running
from ...trainhub.factories import make_team, make_user
from ...trainhub.web.test_experiments import make_experiment
from ..browser import assert_accessible, save_screenshot, signed_in

pytestmark = [pytest.mark.browser]

LIVE = 10_000  # ms: a few of the body's 2-s polls


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running in this thread, which Django takes
    for an async context; the test's ORM calls are plain blocking ones (as in any test)."""
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if before is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def alice(transactional_db: None, settings: Any) -> User:
    # The trials' job events reach no Celery task or feed: the test moves the search on.
    settings.EVENT_HANDLERS = [HANDLER]
    user = make_user("alice")
    make_team("recsys", members={user: Role.MEMBER}, cpu=8, memory_mb=16384)
    return user


@pytest.fixture
def page(browser: Browser, live_server: Any, alice: User) -> Iterator[Page]:
    with signed_in(browser, live_server.url, "alice", "pw-alice") as opened:
        yield opened


def _finish_round(experiment: Experiment, values: list[float]) -> Experiment:
    """End each running trial's job with the next value, at its rung's epochs."""
    for trial, value in zip(running(experiment), values, strict=False):
        assert trial.job is not None
        end_run(trial.job, test_rmse=value, epoch=trial.job.job_spec.args["epochs"])
    return advance(experiment)


def test_the_experiment_page_follows_its_trials_live(
    page: Page, live_server: Any, alice: User
) -> None:
    experiment = make_experiment(alice)
    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    page.evaluate("window.__notReloaded = true")
    rows = page.locator("#trial-table tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#best-none")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("live")
    assert_accessible(page)

    # Trials 1 and 2 end their first rung: two new trials start; trial 2 is the best.
    experiment = _finish_round(experiment, [0.93, 0.91])
    expect(rows).to_have_count(4, timeout=LIVE)
    expect(page.locator("#best-trial-link")).to_have_text("Trial 2")
    expect(page.locator("#best-metric")).to_have_text("0.91")
    expect(page.locator("#trial-2")).to_have_class("best-trial")
    chart = page.locator('#charts .chart[data-metric="test_rmse"]')
    expect(chart).to_have_attribute("data-drawn", "2", timeout=LIVE)
    expect(chart.locator(".u-legend")).to_contain_text("trial 2")
    expect(page.locator('.param-plot[data-param="lr"] circle.point.best')).to_have_count(1)

    # Trial 3 beats it: the best trial changes, still without a reload; it is promoted to
    # the next rung beside one new trial.
    experiment = _finish_round(experiment, [0.85, 0.95])
    expect(page.locator("#best-trial-link")).to_have_text("Trial 3", timeout=LIVE)
    expect(page.locator("#best-metric")).to_have_text("0.85")
    expect(rows).to_have_count(5, timeout=LIVE)
    expect(page.locator("#trial-3")).to_contain_text("1 (3 epochs)")
    expect(chart).to_have_attribute("data-drawn", "4", timeout=LIVE)
    assert page.evaluate("window.__notReloaded") is True
    save_screenshot(page, "experiment")

    # Pause and resume from the keyboard; the state, the buttons and the body follow.
    page.locator("#experiment-pause").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#experiment-state")).to_have_text("paused", timeout=LIVE)
    expect(page.locator("#experiment-actions .notice")).to_be_focused()
    expect(page.locator("#experiment-resume")).to_be_visible()
    assert_accessible(page)
    page.locator("#experiment-resume").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#experiment-state")).to_have_text("running", timeout=LIVE)

    # Cancel asks first, in a dialog; then the page ends its updates.
    page.locator("#experiment-cancel").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel experiment").click()
    expect(page.locator("#experiment-state")).to_have_text("cancelled", timeout=LIVE)
    expect(page.locator("#live-status")).to_contain_text("ended")
    expect(page.locator("#experiment-cancel")).to_have_count(0)
    assert page.evaluate("window.__notReloaded") is True

    # The list names it; the jobs list names each trial's experiment.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Experiments").click()
    expect(page.locator("#experiment-table")).to_contain_text("mf-search")
    assert_accessible(page)
    page.goto(f"{live_server.url}/jobs/")
    expect(page.locator(".trial-of").first).to_contain_text("experiment mf-search · trial")


def test_an_experiment_is_submitted_from_the_search_section(page: Page, live_server: Any) -> None:
    page.goto(f"{live_server.url}/jobs/new/")
    fields = page.locator("#search-fields")
    expect(fields).to_be_hidden()
    toggle = page.get_by_label("Run a hyperparameter search")
    toggle.focus()
    page.keyboard.press("Space")
    expect(fields).to_be_visible()
    expect(page.locator("#submit-button")).to_have_text("Submit experiment")
    # A refused search: the error beside its field, what was typed kept.
    page.get_by_label("Trials at most").fill("0")
    page.locator("#submit-button").click()
    expect(page.locator('[id="id_search.max_trials_error"]')).to_contain_text("whole number")
    expect(page.get_by_label("Trials at most")).to_have_value("0")
    assert_accessible(page)
    page.get_by_label("Trials at most").fill("4")
    page.locator("#submit-button").click()
    page.wait_for_url("**/experiments/*/")
    expect(page.locator("#trial-table tbody tr")).to_have_count(2)
    assert_accessible(page)
