"""The YAML tab's editor (CodeMirror), as alice: line numbers, no soft wrap, Tab leaves it;
a spec with an unknown field and workers.max below workers.min, typed into it, is refused
with both errors listed ("line N"), by "Check" too, and both lines marked in the editor;
axe-clean."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from ..browser import assert_accessible
from ..cluster import LiveCluster
from .conftest import SignedIn
from .jobs_cleanup import jobs_named

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

# workers.max below workers.min on line 7; the unknown field is typed on line 10.
TEXT = """\
name: web-yaml-two-errors
team: recsys
entrypoint: ps_runtime.examples.movielens:train
parameter_servers: {replicas: 1, resources: {cpu: 0.5, memory_mb: 512}}
workers:
  min: 3
  max: 2
  resources: {cpu: 0.5, memory_mb: 512}
coordinator: {resources: {cpu: 0.5, memory_mb: 512}}
"""
TYPED = "foo: 1"


def _line(page: Page, number: int) -> Locator:
    return page.locator("#panel-yaml .cm-content .cm-line").nth(number - 1)


def _gutter_marker_lines(page: Page) -> list[int]:
    """The editor lines (1-based) beside which the lint gutter shows an error marker."""
    return page.evaluate(
        """() => {
          const lines = [...document.querySelectorAll("#panel-yaml .cm-content .cm-line")];
          return [...document.querySelectorAll("#panel-yaml .cm-lint-marker-error")].map((m) => {
            const top = m.closest(".cm-gutterElement").getBoundingClientRect().top;
            return 1 + lines.findIndex((l) => Math.abs(l.getBoundingClientRect().top - top) < 2);
          }).sort((a, b) => a - b);
        }"""
    )


def test_both_errors_are_listed_and_marked_on_their_lines_in_the_editor(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice") as page:
        page.goto(f"{live_cluster.url}/jobs/new/")
        page.get_by_role("tab", name="YAML").click()
        editor = page.get_by_role("textbox", name="Job spec (YAML)", exact=True)
        expect(editor).to_be_visible()
        expect(editor).to_have_attribute("contenteditable", "true")
        expect(page.locator("#id_spec")).to_be_hidden()  # the field, kept in sync under it
        expect(editor).not_to_have_class(re.compile("cm-lineWrapping"))

        editor.fill(TEXT)
        page.keyboard.press("Control+End")
        page.keyboard.type(TYPED)
        expect(page.locator("#id_spec")).to_have_value(TEXT + TYPED)
        expect(page.locator("#panel-yaml .cm-lineNumbers")).to_contain_text("10")

        # Tab is the browser's: it leaves the editor and types nothing.
        editor.focus()
        page.keyboard.press("Tab")
        expect(editor).not_to_be_focused()
        expect(page.locator("#id_spec")).to_have_value(TEXT + TYPED)

        # "Check" lists both errors with their lines too.
        page.get_by_role("button", name="Check").click()
        checked = page.locator("#preview .preview-invalid li")
        expect(checked).to_have_count(2)
        expect(checked.filter(has_text="Unknown field 'foo'.")).to_contain_text("line 10: foo")
        expect(checked.filter(has_text="max (2) must be at least min (3).")).to_contain_text(
            "line 7: workers.max"
        )

        page.get_by_role("button", name="Submit job").click()
        page.wait_for_load_state()

        errors = page.locator("#panel-yaml .yaml-errors li")
        expect(errors).to_have_count(2)
        expect(errors.filter(has_text="Unknown field 'foo'.")).to_contain_text("line 10")
        expect(errors.filter(has_text="max (2) must be at least min (3).")).to_contain_text(
            "line 7"
        )
        editor = page.get_by_role("textbox", name="Job spec (YAML)", exact=True)
        expect(editor).to_be_visible()
        expect(page.locator("#id_spec")).to_have_value(TEXT + TYPED)
        expect(editor).to_have_attribute("aria-describedby", re.compile(r"\bid_spec_error\b"))

        # Both lines marked: underlined, and a marker in the gutter beside each.
        expect(page.locator("#panel-yaml .cm-lintRange-error")).to_have_count(2)
        expect(_line(page, 7).locator(".cm-lintRange-error")).to_contain_text("max: 2")
        expect(_line(page, 10).locator(".cm-lintRange-error")).to_contain_text("foo: 1")
        expect(page.locator("#panel-yaml .cm-lint-marker-error")).to_have_count(2)
        assert _gutter_marker_lines(page) == [7, 10]
        expect(page.locator("#panel-yaml .cm-lineNumbers")).to_contain_text("10")

        # "line 7" takes the cursor there.
        page.locator("#panel-yaml .yaml-errors").get_by_role("link", name="line 7").click()
        expect(editor).to_be_focused()
        expect(page.locator("#panel-yaml .cm-activeLine")).to_have_text("  max: 2")

        assert jobs_named(live_cluster, "web-yaml-two-errors") == []
        assert_accessible(page)
