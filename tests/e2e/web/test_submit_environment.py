"""The submit page's Code and Environment sections in a real browser, as alice (issue 27):
an archive chosen is uploaded at once and its digest fills `code`; the requirements,
Python and build timeout go with the spec (the preview and the YAML tab see them) and
the job page lists them; a bad requirement line or an unsafe archive is refused beside
its field and nothing is created."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from ...archive_builders import MYMODEL, tar_gz, traversal_tar
from ..browser import assert_accessible, save_screenshot
from ..cluster import LiveCluster
from .conftest import SignedIn
from .jobs_cleanup import ended_afterwards, jobs_named
from .test_submit import _fill_small_job

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.slow]

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# Small wheels: the node may really build this environment while the test looks on.
REQUIREMENTS = "# what mymodel imports\nsix>=1.16"
ARCHIVE_REQUIREMENTS = b"idna>=3\n"


def _choose_archive(page: Page, name: str, data: bytes) -> None:
    page.get_by_label("Code archive").set_input_files(
        {"name": name, "mimeType": "application/gzip", "buffer": data}
    )


def _requirements(page: Page) -> list[str]:
    return page.locator("#job-requirements li").all_inner_texts()


def test_alice_uploads_code_and_lists_packages_and_the_job_page_shows_them(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice") as page, ended_afterwards(live_cluster) as started:
        page.goto(f"{live_cluster.url}/jobs/new/")
        _fill_small_job(page, "web-env-mf")

        # Chosen, uploaded at once; the digest fills the spec's `code`.
        archive = tar_gz({"mymodel.py": MYMODEL, "requirements.txt": ARCHIVE_REQUIREMENTS})
        _choose_archive(page, "src.tar.gz", archive)
        expect(page.locator("#code-upload-status")).to_contain_text("Uploaded src.tar.gz")
        expect(page.get_by_label("Code digest")).to_have_value(DIGEST)
        expect(page.locator("#code-progress")).to_be_hidden()

        environment = page.get_by_role("group", name="Environment")
        environment.get_by_label("Requirements").fill(REQUIREMENTS)
        expect(environment.get_by_label("Requirements")).to_have_attribute(
            "placeholder", re.compile("torch>=2.3")
        )
        environment.get_by_label("Python version").fill("")
        environment.get_by_label("Build timeout (s)").fill("600")

        # The dry run judges the new fields too.
        page.get_by_role("button", name="Check").click()
        expect(page.locator("#preview .preview")).to_contain_text(re.compile("Fits now|Would wait"))

        # The YAML tab carries them across, and back.
        page.get_by_role("tab", name="YAML").click()
        spec_box = page.locator("#id_spec")  # the field under the YAML editor
        expect(spec_box).to_have_value(re.compile(r"code: sha256:[0-9a-f]{64}"))
        expect(spec_box).to_have_value(
            re.compile(r"environment:\n  requirements: \[six>=1\.16\]\n  timeout_seconds: 600")
        )
        page.get_by_role("tab", name="Form").click()
        expect(environment.get_by_label("Requirements")).to_have_value("six>=1.16")

        assert_accessible(page)
        page.get_by_role("group", name="Code").evaluate("el => el.scrollIntoView()")
        save_screenshot(page, "submit-environment")

        page.get_by_role("button", name="Submit job").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        started.append(job_id)
        spec = live_cluster.job(job_id)["spec"]
        assert DIGEST.match(spec["code"])
        # The archive's requirements.txt joined the typed ones.
        assert spec["environment"]["requirements"] == ["six>=1.16", "idna>=3"]
        assert spec["environment"]["timeout_seconds"] == 600

        expect(page.get_by_role("heading", level=1)).to_contain_text("web-env-mf")
        expect(page.locator("#job-requirements li")).to_have_count(2)
        assert _requirements(page) == ["six>=1.16", "idna>=3"]
        expect(page.locator("#job-python")).to_have_text("the nodes' own")
        expect(page.locator("#job-code")).to_contain_text(spec["code"][:19])
        assert_accessible(page)


def test_a_bad_requirement_and_an_unsafe_archive_are_refused_beside_their_fields(
    as_person: SignedIn, live_cluster: LiveCluster
) -> None:
    with as_person("alice", dark=True) as page:
        page.goto(f"{live_cluster.url}/jobs/new/")
        _fill_small_job(page, "web-env-bad")

        # An unsafe archive: refused beside the file input, nothing in `code`.
        _choose_archive(page, "evil.tar.gz", traversal_tar())
        archive_error = page.locator("#id_code_file_error")
        expect(archive_error).to_be_visible()
        expect(archive_error).to_contain_text("evil.tar.gz: Refused: '../evil.py' contains '..'")
        archive_input = page.get_by_label("Code archive")
        expect(archive_input).to_have_attribute("aria-invalid", "true")
        expect(archive_input).to_have_attribute(
            "aria-describedby", re.compile("id_code_file_error")
        )
        expect(page.get_by_label("Code digest")).to_have_value("")

        # An option where a requirement goes: the server's words beside the textarea.
        requirements = page.get_by_label("Requirements")
        requirements.fill("numpy>=1.26\n--index-url http://x")
        page.get_by_role("button", name="Submit job").click()
        page.wait_for_load_state()

        requirements = page.get_by_label("Requirements")
        error = page.locator("[id='id_environment.requirements_error']")
        expect(error).to_be_visible()
        expect(error).to_contain_text("requirements line 2 ('--index-url http://x')")
        expect(error).to_contain_text("is an option, not a requirement")
        expect(requirements).to_have_value("numpy>=1.26\n--index-url http://x")
        expect(requirements).to_have_attribute("aria-invalid", "true")
        expect(requirements).to_have_attribute(
            "aria-describedby", re.compile(r"id_environment\.requirements_error")
        )
        expect(page.locator(".form-errors")).to_contain_text("fix the 1 error")
        assert jobs_named(live_cluster, "web-env-bad") == []

        # The dry run names it too.
        page.get_by_role("button", name="Check").click()
        expect(page.locator("#preview .preview-invalid")).to_contain_text(
            "environment.requirements"
        )
        assert jobs_named(live_cluster, "web-env-bad") == []
        assert_accessible(page)
