"""Submitting from the web, as alice (a member of recsys): the form, the YAML editor, the
preview, and a refused YAML that shows its error beside the YAML and creates nothing."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from .conftest import SignedIn
from .jobs_cleanup import ended_afterwards, jobs_named

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

BAD_YAML = """\
name: web-yaml-bad
team: recsys
entrypoint: ps_runtime.examples.movielens:train
workers: {min: 3, max: 2}
"""


def _fill_small_job(page: Page, name: str) -> None:
    """A 1.5-CPU job through the form's labelled fields."""
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Team", exact=True).select_option("recsys")
    page.get_by_label("Entrypoint").fill("ps_runtime.examples.movielens:train")
    page.get_by_label("Arguments (JSON or YAML)").fill("{epochs: 10000}")
    for label in ("CPU per PS", "CPU per worker", "Coordinator CPU"):
        page.get_by_label(label, exact=True).fill("0.5")
    for label in ("Memory per PS (MiB)", "Memory per worker (MiB)", "Coordinator memory (MiB)"):
        page.get_by_label(label, exact=True).fill("512")
    page.get_by_label("Workers (min)").fill("1")
    page.get_by_label("Workers (max)").fill("1")


def test_alice_submits_through_the_form_and_lands_on_the_job_page(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice") as page, ended_afterwards(live_cluster) as started:
        page.goto(f"{live_cluster.url}/jobs/new/")
        expect(page.get_by_role("tab", name="Form")).to_have_attribute("aria-selected", "true")
        _fill_small_job(page, "web-form-mf")
        # The restart and stall policy, from the keyboard like any field.
        page.get_by_label("When it stalls").select_option("notify")
        page.get_by_label("Restarts for those causes (max)").fill("4")

        # The entrypoint offers the built-in examples.
        examples = page.locator("#entrypoint-examples option")
        assert "ps_runtime.examples.ctr:train" in examples.evaluate_all(
            "options => options.map(o => o.value)"
        )

        # The preview asks the live scheduler, and creates nothing.
        page.get_by_role("button", name="Check").click()
        expect(page.locator("#preview .preview")).to_contain_text(re.compile("Fits now|Would wait"))
        assert jobs_named(live_cluster, "web-form-mf") == []

        # The YAML tab shows the same spec (keyboard: arrow keys move between tabs).
        page.get_by_role("tab", name="Form").focus()
        page.keyboard.press("ArrowRight")
        yaml_tab = page.get_by_role("tab", name="YAML")
        expect(yaml_tab).to_have_attribute("aria-selected", "true")
        expect(yaml_tab).to_be_focused()
        spec_box = page.get_by_label("Job spec (YAML)", exact=True)
        expect(spec_box).to_be_visible()
        # The editor (test_submit_yaml_editor.py) keeps the form's field, under it, in sync.
        expect(page.locator("#id_spec")).to_have_value(
            re.compile(r"name: web-form-mf[\s\S]*cpu: 0.5[\s\S]*on_stall: notify")
        )
        page.keyboard.press("ArrowLeft")
        expect(page.get_by_label("Name", exact=True)).to_have_value("web-form-mf")

        assert_accessible(page)
        save_screenshot(page, "submit")

        page.get_by_role("button", name="Submit job").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        started.append(job_id)
        job = live_cluster.job(job_id)
        assert (job["name"], job["team"], job["submitted_by"]) == ("web-form-mf", "recsys", "alice")
        assert (job["spec"]["retry"]["max"], job["spec"]["stall"]["on_stall"]) == (4, "notify")
        expect(page.get_by_role("heading", level=1)).to_contain_text("web-form-mf")


def test_a_yaml_with_min_above_max_shows_the_error_beside_the_yaml_and_creates_nothing(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/jobs/new/")
        page.get_by_role("tab", name="YAML").click()
        # The editor (its chunk loads with the tab) takes the field's place: type into it
        # once it is there, not into the field it is about to take over.
        spec_box = page.get_by_role("textbox", name="Job spec (YAML)", exact=True)
        expect(spec_box).to_have_attribute("contenteditable", "true")
        spec_box.fill(BAD_YAML)
        expect(page.locator("#id_spec")).to_have_value(BAD_YAML)
        page.get_by_role("button", name="Submit job").click()
        page.wait_for_load_state()

        errors = page.locator("#panel-yaml .yaml-errors")
        expect(errors).to_contain_text("workers.max")
        expect(errors).to_contain_text("max (2) must be at least min (3).")
        # Beside the YAML, described by it, and the typed text kept.
        expect(page.locator("#id_spec")).to_have_value(BAD_YAML)
        expect(spec_box).to_have_attribute("aria-describedby", re.compile(r"\bid_spec_error\b"))
        expect(page.get_by_role("tab", name="YAML")).to_have_attribute("aria-selected", "true")
        assert jobs_named(live_cluster, "web-yaml-bad") == []
        assert_accessible(page)
